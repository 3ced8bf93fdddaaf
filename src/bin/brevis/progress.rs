//! The progress line of long work: bytes done of the total, speed and time left, on stderr
//! when it is a terminal and `-q` is not given. It appears after a second of work (short
//! files print nothing) and is cleared when the file is done.

use indicatif::{HumanDuration, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long work runs before the line appears; `BREVIS_PROGRESS_DELAY_MS` sets it (the tests
/// use 0 to see the line, or its absence, on short work).
fn delay() -> Duration {
    let ms = std::env::var("BREVIS_PROGRESS_DELAY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    Duration::from_millis(ms)
}

/// The line of one file, drawn by a thread of its own from the library's byte counter.
pub struct Progress {
    counter: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Starts the line for `total` bytes of `label` (shown) when `wanted` and stderr is a
    /// terminal; `idle` is shown while no byte is done yet (the search, before coding).
    pub fn start(wanted: bool, total: u64, label: String, idle: &'static str) -> Progress {
        let counter = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = (wanted && std::io::stderr().is_terminal()).then(|| {
            let (counter, stop) = (counter.clone(), stop.clone());
            std::thread::spawn(move || draw(&counter, &stop, total, &label, idle))
        });
        Progress { counter, stop, thread }
    }

    /// The counter to give the library (`Options::progress`, `DecodeOptions::progress`).
    pub fn counter(&self) -> Arc<AtomicU64> {
        self.counter.clone()
    }

    /// Clears the line (for good: the file's work is done).
    pub fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The last part of a path, at most 20 characters (the line must fit an 80-column terminal).
fn short(label: &str) -> String {
    let name = std::path::Path::new(label).file_name().map_or(label.into(), |n| n.to_string_lossy());
    let chars: Vec<char> = name.chars().collect();
    match chars.len() {
        0..=20 => name.into_owned(),
        n => format!("...{}", chars[n - 17..].iter().collect::<String>()),
    }
}

fn draw(counter: &AtomicU64, stop: &AtomicBool, total: u64, label: &str, idle: &'static str) {
    let start = Instant::now();
    let tick = Duration::from_millis(100);
    while start.elapsed() < delay() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep(tick.min(delay()));
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style =
        ProgressStyle::with_template("{prefix} [{wide_bar}] {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}")
            .expect("a valid template")
            .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(short(label));
    while !stop.load(Ordering::Relaxed) {
        let done = counter.load(Ordering::Relaxed).min(total);
        bar.set_position(done);
        bar.set_message(if done == 0 { idle.to_string() } else { format!("ETA {:#}", HumanDuration(bar.eta())) });
        std::thread::sleep(tick);
    }
    bar.finish_and_clear();
}
