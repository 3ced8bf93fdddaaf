// Runs a prompt in llama.cpp from a GGUF model or a Brevis archive of one (`.gguf.brv`), with
// greedy sampling, and prints the prompt and the generated text to stdout as llama.cpp's own
// `llama-simple` does. An archive is read through llama.cpp's own loader from a stream that decodes
// what it reads, never written anywhere (`brevis_llama::load_model`, bindings/cpp/brevis_llama.hpp).
//
//   llama_run MODEL [-n N] [-t THREADS] [--ref FILE] [--memfd] [--no-mmap] [--t0-ns NS] [--ignore-eog] [--logits FILE]
//             [--tokens FILE] [--embed FILE] [PROMPT...]
//
//   --ref FILE     the reference an archive made with `brevis compress --ref` needs
//   --memfd        load an archive by the fallback path instead (decoded whole into a memfd)
//   --no-mmap      load a GGUF file with llama.cpp's reads instead of its memory map
//   --t0-ns NS     measure times from NS (nanoseconds since the epoch: when a wrapper such as
//                  `brevis exec` that starts this program was started) instead of this start
//   -n N           tokens to generate (default 32; fewer when the model ends the text)
//   --ignore-eog   go on after an end-of-generation token (exactly N tokens)
//   -t THREADS     llama.cpp's threads (default: llama.cpp's)
//   --logits FILE  write the logits of the first step (the vocabulary's floats, native order)
//   --tokens FILE  write the generated token ids, one per line
//   --embed FILE   an embedding model (an encoder such as BERT): run the prompt through it once and
//                  write its pooled embedding (the model's pooling; floats, native order) instead of
//                  generating; stdout gets the embedding's first values
//
// On stderr: how long the model took to be ready and the first token to come, from the start of
// the program (what a user waits for), in milliseconds, and the process's peak RSS (VmHWM).
//
// Build (README.md, "Use with llama.cpp"):
//   c++ -std=c++17 -O2 bindings/cpp/llama_run.cpp -Iinclude -I<llama.cpp>/include -I<llama.cpp>/ggml/include
//       -Ltarget/release -L<llama.cpp build>/bin -lbrevis -lllama -lggml -lggml-base -o llama_run
#include "brevis_llama.hpp"

#include <chrono>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::system_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int usage(const char *argv0) {
    std::fprintf(stderr,
                 "usage: %s MODEL [-n N] [-t THREADS] [--ref FILE] [--memfd] [--no-mmap] [--t0-ns NS] [--ignore-eog] [--logits FILE] "
                 "[--tokens FILE] [--embed FILE] [PROMPT...]\n",
                 argv0);
    return 2;
}

// The text of one token, as llama-simple prints it.
bool piece(const llama_vocab *vocab, llama_token id, std::string &out) {
    char buf[256];
    int n = llama_token_to_piece(vocab, id, buf, sizeof buf, 0, true);
    if (n < 0) {
        return false;
    }
    out.assign(buf, n);
    return true;
}

struct Args {
    std::string model;
    std::string prompt = "Hello my name is";
    int n_predict = 32;
    int threads = 0;
    bool ignore_eog = false;
    bool memfd = false;
    bool no_mmap = false;
    std::string ref_path;
    long long t0_ns = 0;
    std::string logits_path;
    std::string tokens_path;
    std::string embed_path;
};

bool parse(int argc, char **argv, Args &a) {
    if (argc < 2) {
        return false;
    }
    a.model = argv[1];
    int i = 2;
    for (; i < argc; i++) {
        std::string k = argv[i];
        if (k == "--ignore-eog") {
            a.ignore_eog = true;
        } else if (k == "--memfd") {
            a.memfd = true;
        } else if (k == "--no-mmap") {
            a.no_mmap = true;
        } else if ((k == "-n" || k == "-t" || k == "--ref" || k == "--t0-ns" || k == "--logits" || k == "--tokens" ||
                    k == "--embed") &&
                   i + 1 < argc) {
            std::string v = argv[++i];
            if (k == "-n") {
                a.n_predict = std::atoi(v.c_str());
            } else if (k == "-t") {
                a.threads = std::atoi(v.c_str());
            } else if (k == "--ref") {
                a.ref_path = v;
            } else if (k == "--t0-ns") {
                a.t0_ns = std::atoll(v.c_str());
            } else if (k == "--logits") {
                a.logits_path = v;
            } else if (k == "--embed") {
                a.embed_path = v;
            } else {
                a.tokens_path = v;
            }
        } else {
            break;  // the prompt starts here
        }
    }
    if (i < argc) {
        a.prompt = argv[i++];
        for (; i < argc; i++) {
            a.prompt += " ";
            a.prompt += argv[i];
        }
    }
    return a.n_predict > 0;
}

// The process's peak resident set (VmHWM of /proc/self/status), in kB; 0 when unknown.
long peak_rss_kb() {
    FILE *f = std::fopen("/proc/self/status", "r");
    long kb = 0;
    char line[256];
    while (f != nullptr && std::fgets(line, sizeof line, f) != nullptr) {
        if (std::strncmp(line, "VmHWM:", 6) == 0) {
            kb = std::atol(line + 6);
        }
    }
    if (f != nullptr) {
        std::fclose(f);
    }
    return kb;
}

bool write_floats(const std::string &path, const float *logits, int n) {
    FILE *f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) {
        return false;
    }
    bool ok = std::fwrite(logits, sizeof(float), n, f) == static_cast<size_t>(n);
    return std::fclose(f) == 0 && ok;
}

// A context of `n_ctx` tokens taking batches of `n_batch` (embeddings: the whole batch in one
// pass, pooled), on the threads asked for; nullptr after saying why.
llama_context *context(llama_model *model, const Args &args, uint32_t n_ctx, uint32_t n_batch, bool embeddings) {
    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = n_ctx;
    cparams.n_batch = n_batch;
    if (embeddings) {
        cparams.n_ubatch = n_batch;
        cparams.embeddings = true;
    }
    if (args.threads > 0) {
        cparams.n_threads = args.threads;
        cparams.n_threads_batch = args.threads;
    }
    llama_context *ctx = llama_init_from_model(model, cparams);
    if (ctx == nullptr) {
        std::fprintf(stderr, "llama_run: cannot create the context\n");
    }
    return ctx;
}

// The prompt's pooled embedding from an embedding model: one pass (llama_encode), written to
// `path`, its first values printed. 0 on success.
int embed(llama_model *model, const std::vector<llama_token> &tokens, const Args &args, Clock::time_point t0,
          double ready_ms) {
    const uint32_t n = static_cast<uint32_t>(tokens.size());
    llama_context *ctx = context(model, args, n, n, true);
    if (ctx == nullptr) {
        return 1;
    }
    std::vector<llama_token> ids = tokens;
    if (llama_encode(ctx, llama_batch_get_one(ids.data(), static_cast<int32_t>(n))) != 0) {
        std::fprintf(stderr, "llama_run: encoding failed\n");
        return 1;
    }
    const float *e = llama_get_embeddings_seq(ctx, 0);
    const int dim = llama_model_n_embd(model);
    if (e == nullptr || !write_floats(args.embed_path, e, dim)) {
        std::fprintf(stderr, "llama_run: no pooled embedding to write to %s\n", args.embed_path.c_str());
        return 1;
    }
    for (int i = 0; i < dim && i < 8; i++) {
        std::printf("%s%.6f", i > 0 ? " " : "", e[i]);
    }
    std::printf("\n");
    std::fprintf(stderr, "llama_run: model ready at %.1f ms, embedding at %.1f ms, %u tokens, peak RSS %ld kB\n",
                 ready_ms, ms_since(t0), n, peak_rss_kb());
    llama_free(ctx);
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    Clock::time_point t0 = Clock::now();
    std::setlocale(LC_NUMERIC, "C");
    Args args;
    if (!parse(argc, argv, args)) {
        return usage(argv[0]);
    }
    if (args.t0_ns > 0) {
        t0 = Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(args.t0_ns)));
    }

    llama_backend_init();
    llama_model_params mparams = llama_model_default_params();
    if (args.no_mmap) {
        mparams.load_mode = LLAMA_LOAD_MODE_NONE;
    }
    const char *error = nullptr;
    const char *ref = args.ref_path.empty() ? nullptr : args.ref_path.c_str();
    llama_model *model = args.memfd && brevis_llama::is_archive(args.model.c_str())
                             ? brevis_llama::load_model_memfd(args.model.c_str(), mparams, nullptr, &error)
                             : brevis_llama::load_model(args.model.c_str(), mparams, ref, nullptr, &error);
    if (model == nullptr) {
        std::fprintf(stderr, "llama_run: %s: %s\n", args.model.c_str(), error);
        return 1;
    }
    const double ready_ms = ms_since(t0);
    const llama_vocab *vocab = llama_model_get_vocab(model);

    const int n_prompt = -llama_tokenize(vocab, args.prompt.c_str(), args.prompt.size(), nullptr, 0, true, true);
    std::vector<llama_token> tokens(n_prompt);
    if (llama_tokenize(vocab, args.prompt.c_str(), args.prompt.size(), tokens.data(), tokens.size(), true, true) < 0) {
        std::fprintf(stderr, "llama_run: cannot tokenize the prompt\n");
        return 1;
    }
    if (!args.embed_path.empty()) {
        const int rc = embed(model, tokens, args, t0, ready_ms);
        llama_model_free(model);
        llama_backend_free();
        return rc;
    }

    // As llama-simple: the last token is not decoded.
    llama_context *ctx = context(model, args, n_prompt + args.n_predict - 1, n_prompt, false);
    if (ctx == nullptr) {
        return 1;
    }
    llama_sampler *smpl = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(smpl, llama_sampler_init_greedy());

    std::string text;
    for (llama_token id : tokens) {
        if (!piece(vocab, id, text)) {
            std::fprintf(stderr, "llama_run: cannot print a prompt token\n");
            return 1;
        }
        std::fputs(text.c_str(), stdout);
    }

    std::vector<llama_token> generated;
    double first_ms = 0;
    llama_batch batch = llama_batch_get_one(tokens.data(), n_prompt);
    llama_token next = 0;
    for (int step = 0; step < args.n_predict; step++) {
        if (llama_decode(ctx, batch) != 0) {
            std::fprintf(stderr, "llama_run: decoding failed at step %d\n", step);
            return 1;
        }
        if (step == 0 && !args.logits_path.empty()) {
            const float *logits = llama_get_logits_ith(ctx, -1);
            if (logits == nullptr || !write_floats(args.logits_path, logits, llama_vocab_n_tokens(vocab))) {
                std::fprintf(stderr, "llama_run: cannot write %s\n", args.logits_path.c_str());
                return 1;
            }
        }
        next = llama_sampler_sample(smpl, ctx, -1);
        if (step == 0) {
            first_ms = ms_since(t0);
        }
        if (!args.ignore_eog && llama_vocab_is_eog(vocab, next)) {
            break;
        }
        generated.push_back(next);
        if (!piece(vocab, next, text)) {
            std::fprintf(stderr, "llama_run: cannot print a token\n");
            return 1;
        }
        std::fputs(text.c_str(), stdout);
        std::fflush(stdout);
        batch = llama_batch_get_one(&next, 1);
    }
    std::fputs("\n", stdout);

    if (!args.tokens_path.empty()) {
        FILE *f = std::fopen(args.tokens_path.c_str(), "w");
        bool ok = f != nullptr;
        for (size_t i = 0; ok && i < generated.size(); i++) {
            ok = std::fprintf(f, "%d\n", generated[i]) > 0;
        }
        if (f == nullptr || std::fclose(f) != 0 || !ok) {
            std::fprintf(stderr, "llama_run: cannot write %s\n", args.tokens_path.c_str());
            return 1;
        }
    }
    std::fprintf(stderr, "llama_run: model ready at %.1f ms, first token at %.1f ms, %zu tokens, peak RSS %ld kB\n",
                 ready_ms, first_ms, generated.size(), peak_rss_kb());

    llama_sampler_free(smpl);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
