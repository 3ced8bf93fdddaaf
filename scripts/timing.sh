# Shared by the CLI timing scripts (sourced): t CMD... prints the wall time of CMD in
# microseconds; median reads such times, one a line, and prints their median in seconds.
t() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(( (e - s) / 1000 )); }
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f", m/1e6}'; }
