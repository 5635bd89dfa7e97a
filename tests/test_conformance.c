// tests/test_conformance.c: one test per kernel family, written once against the Backend
// interface (kernels/kernels.h), run against the CPU backend in `make test` and against the
// GPU backend by build/conformance_gpu (tests/conformance.h says how the two builds differ).
// Every test draws fresh random inputs, poisons the outputs it expects written, runs the
// kernel under test on the backend's memory and compares with the expected values.
// Tolerances: tests/conformance.h.
#include "tests/conformance.h"
#include <stdio.h>
#ifdef MESHMOE_CONFORMANCE_GPU
#include "gpu/backend.h"
#endif

int main(void) {
    conformance_begin();
#ifdef MESHMOE_CONFORMANCE_GPU
    if (gpu_device_count() == 0) {
        printf("conformance: no GPU (or no driver) on this machine\n");
        check(0, "a GPU to run on");
        printf("%d passed, %d failed\n", checks_passed, checks_failed);
        return 1;
    }
    printf("conformance: GPU 0 is %s\n", gpu_device_name());
#endif
    struct { const char *family; const void *table; void (*test)(void); } families[] = {
        {"matmul", UNDER_TEST->matmul, test_matmul},       {"matmul16", UNDER_TEST->matmul16, test_matmul16},
        {"norm", UNDER_TEST->norm, test_norm},
        {"rope", UNDER_TEST->rope, test_rope},             {"embedding", UNDER_TEST->embedding, test_embedding},
        {"attention", UNDER_TEST->attention, test_attention},
        {"mla", UNDER_TEST->mla, test_mla},                {"router", UNDER_TEST->router, test_router},
        {"moe", UNDER_TEST->moe, test_moe},                {"mlp cast sum", UNDER_TEST->mlp, test_elementwise},
        {"loss", UNDER_TEST->loss, test_loss},             {"optim", UNDER_TEST->optim, test_optim},
        {"init", UNDER_TEST->init, test_init},             {"memory", UNDER_TEST->mem, test_memory},
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        int failed_before = checks_failed, passed_before = checks_passed;
        if (!families[i].table) {
            printf("family %-13s NOT IMPLEMENTED on %s\n", families[i].family, UNDER_TEST->name);
            check(0, "family %s has no %s twin", families[i].family, UNDER_TEST->name);
            continue;
        }
        families[i].test();
        check(checks_passed + checks_failed > passed_before + failed_before, "family %s ran no check",
              families[i].family);   // (a family whose cases all fell away tests nothing)
        printf("family %-13s %d passed, %d failed\n", families[i].family, checks_passed - passed_before,
               checks_failed - failed_before);
    }
    printf("%d passed, %d failed\n", checks_passed, checks_failed);
    return checks_failed ? 1 : 0;
}

