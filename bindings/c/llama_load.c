/* Loads a llama.cpp model from a GGUF file or a Brevis archive of one, from C, with
 * brevis_llama_load_model (bindings/cpp/brevis_llama.h), and prints what llama.cpp says of it:
 * its description, parameter count and size, and the vocabulary's size.
 *
 *   llama_load MODEL [REFERENCE]
 *
 * Build: cc -std=c11 bindings/c/llama_load.c -Iinclude -Ibindings/cpp -I<llama.cpp>/include
 *        -I<llama.cpp>/ggml/include -lbrevis -lllama -lggml -lggml-base -o llama_load */
#include "brevis_llama.h"

#include <stdio.h>

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level;
    (void)text;
    (void)user;
}

int main(int argc, char **argv) {
    const char *error = NULL;
    char desc[256];
    struct llama_model_params params;
    struct llama_model *model;
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s MODEL [REFERENCE]\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    params = llama_model_default_params();
    model = brevis_llama_load_model(argv[1], params, argc == 3 ? argv[2] : NULL, NULL, &error);
    if (model == NULL) {
        fprintf(stderr, "llama_load: %s: %s\n", argv[1], error);
        return 1;
    }
    llama_model_desc(model, desc, sizeof desc);
    printf("%s, %llu parameters, %llu bytes, %d tokens\n", desc, (unsigned long long)llama_model_n_params(model),
           (unsigned long long)llama_model_size(model), llama_vocab_n_tokens(llama_model_get_vocab(model)));
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
