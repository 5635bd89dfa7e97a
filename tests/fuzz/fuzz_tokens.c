// tests/fuzz/fuzz_tokens.c: the data readers. The input is a data file: dataset_path's
// reader (a token file by its magic number, else byte-level text), the llm.c token-file
// reader called directly, and the vocabulary check. The property checked: what the check
// accepts holds no token outside the vocabulary (256 here).
#include "fuzz.h"
#include "data/tokens.h"

static uint32_t *tok;

static void free_tok(void *unused) { (void)unused; free(tok); tok = NULL; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    jmp_buf jump;
    const char *path = fuzz_file(data, size);
    for (int reader = 0; reader < 2; reader++) {
        if (!setjmp(jump)) {
            die_set_jump(&jump, 1);
            size_t n = 0;
            tok = reader == 0 ? data_load(path, &n) : tokfile_read(path, &n);
            die_set_cleanup(free_tok, NULL);
            data_check_vocab(tok, n, 256, path);
            for (size_t i = 0; i < n; i++)
                if (tok[i] >= 256) {
                    fprintf(stderr, "token %u at %zu passed the check of a vocabulary of 256\n", tok[i], i);
                    abort();
                }
            die_set_cleanup(NULL, NULL);
            free_tok(NULL);
        }
    }
    die_set_jump(NULL, 0);
    return 0;
}
