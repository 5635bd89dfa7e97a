// tests/test_sample.c: how the sample chooses its tokens (trainer/sampling.c), against
// distributions worked out by hand: logits ln(0.1, 0.2, 0.3, 0.4), whose softmax is those
// probabilities and whose running sums in index order are 0.1, 0.3, 0.6 and 1; each draw u
// is chosen away from those boundaries, so float rounding cannot move a choice. Then the
// prompt key read as ids or as bytes. (Its refusals are tests/inputs.sh's.)
#include "core/common.h"
#include "trainer/sampling.h"
#include "tests/test.h"

static float z4[4];   // ln(0.1, 0.2, 0.3, 0.4)

static int choose(int strategy, int k, float p, float t, const float *z, double u) {
    SamplingRule r = {(DecodeSampling)strategy, k, p, t};
    float work[4];
    return sampling_choose(z, 4, &r, u, work);
}

// want[i]: the token for draw u[i].
static void expect(const char *what, int strategy, int k, float p, float t, const float *z, const double *u,
                   const int *want, int n) {
    for (int i = 0; i < n; i++) {
        int got = choose(strategy, k, p, t, z, u[i]);
        CHECK(got == want[i], "%s: u = %.3f chose %d, want %d", what, u[i], got, want[i]);
    }
}

static void test_strategies(void) {
    const double u[] = {0.05, 0.15, 0.31, 0.65, 0.999};
    const int weighted[] = {0, 1, 2, 3, 3};
    expect("weighted at temperature 1 (running sums 0.1 0.3 0.6 1)", SAMPLING_WEIGHTED, 0, -1, 1, z4, u, weighted, 5);
    // Temperature 0.5: weights p^2 = 0.01 0.04 0.09 0.16, running sums over 0.3: 0.033 0.167 0.467 1.
    const double uh[] = {0.02, 0.1, 0.3, 0.5};
    const int half[] = {0, 1, 2, 3};
    expect("weighted at temperature 0.5 (sums 0.033 0.167 0.467 1)", SAMPLING_WEIGHTED, 0, -1, 0.5f, z4, uh, half, 4);
    // Temperature 2: weights sqrt(p), running sums over 1.944: 0.163 0.393 0.675 1.
    const double ut[] = {0.15, 0.2, 0.5, 0.7};
    expect("weighted at temperature 2 (sums 0.163 0.393 0.675 1)", SAMPLING_WEIGHTED, 0, -1, 2, z4, ut, half, 4);
    const int greedy[] = {3, 3, 3, 3, 3};
    expect("greedy (the largest logit, whatever u)", SAMPLING_GREEDY, 0, -1, 1, z4, u, greedy, 5);
    const float ties[4] = {1, 3, 3, 2};
    const int first[] = {1, 1, 1, 1, 1};
    expect("greedy on a tie: the first", SAMPLING_GREEDY, 0, -1, 1, ties, u, first, 5);
    // topk 2: tokens 2 and 3 kept, 0.3 and 0.4 over 0.7: running sums 0.429, 1.
    const double uk[] = {0.01, 0.40, 0.45, 0.999};
    const int top2[] = {2, 2, 3, 3};
    expect("topk 2 (sums 0.429 1 over tokens 2, 3)", SAMPLING_TOPK, 2, -1, 1, z4, uk, top2, 4);
    expect("topk 1 (greedy)", SAMPLING_TOPK, 1, -1, 1, z4, u, greedy, 5);
    const float even[4] = {5, 5, 5, 1};
    const double ue[] = {0.25, 0.75, 0.999};
    const int lower[] = {0, 1, 1};
    expect("topk 2 of three equal logits: the lower indices", SAMPLING_TOPK, 2, -1, 1, even, ue, lower, 3);
}

static void test_nucleus(void) {
    // Sorted 0.4 0.3 0.2 0.1, running sums 0.4 0.7 0.9 1.
    const double uk[] = {0.01, 0.40, 0.45, 0.999};
    const int top2[] = {2, 2, 3, 3};
    expect("nucleus 0.5: 0.4 + 0.3 reach it (tokens 2, 3)", SAMPLING_NUCLEUS, 0, 0.5f, 1, z4, uk, top2, 4);
    // 0.75: tokens 1, 2, 3, weights 0.2 0.3 0.4 over 0.9, running sums 0.222 0.556 1.
    const double u3[] = {0.1, 0.3, 0.6, 0.999};
    const int top3[] = {1, 2, 3, 3};
    expect("nucleus 0.75: three tokens (sums 0.222 0.556 1)", SAMPLING_NUCLEUS, 0, 0.75f, 1, z4, u3, top3, 4);
    const double u[] = {0.05, 0.15, 0.31, 0.65, 0.999};
    const int all[] = {0, 1, 2, 3, 3};
    expect("nucleus 1: every token (as weighted)", SAMPLING_NUCLEUS, 0, 1.0f, 1, z4, u, all, 5);
    // The mass is softmax(z) without the temperature: at temperature 10 the weights are
    // p^0.1 (0.794 0.851 0.887 0.912), where 0.912 / 3.444 = 0.265 < 0.3 would take two.
    const int one[] = {3, 3, 3, 3, 3};
    expect("nucleus 0.3 at temperature 10: token 3 alone", SAMPLING_NUCLEUS, 0, 0.3f, 10, z4, u, one, 5);
    // Logits 2 1 1 0: softmax 0.534 0.197 0.197 0.072; 0.6 is reached at the first 1, and the
    // other 1 is kept with it: weights e^2, e, e over 12.83, token 2 for u near 1, never 3.
    const float tie[4] = {2, 1, 1, 0};
    const double ut[] = {0.5, 0.7, 0.999};
    const int kept[] = {0, 1, 2};
    expect("nucleus 0.6 with a tie at its edge: both kept", SAMPLING_NUCLEUS, 0, 0.6f, 1, tie, ut, kept, 3);
    // A mass reached exactly: logits 0 -200 -200 -200, whose softmax in double is 1 then 3e-87
    // each; the running sum is 1 at the first, which meets p = 1 (MaxText counts the sums below
    // p), so only token 0 is kept, where at temperature 100 all four would weigh 1, 0.14 each.
    const float far[4] = {0, -200, -200, -200};
    const double uf[] = {0.5, 0.999};
    const int first0[] = {0, 0};
    expect("nucleus 1 reached exactly at the first logit: it alone", SAMPLING_NUCLEUS, 0, 1.0f, 100, far, uf, first0, 2);
    // A NaN among the logits (a diverged model) is ranked below every number: tokens 2 and 3
    // kept, weights 1 and e^-1 in index order, running sums 0.731, 1.
    const float nan4[4] = {NAN, 1, 3, 2};
    const double un[] = {0.3, 0.8};
    const int top2n[] = {2, 3};
    expect("topk 2 with a NaN logit: the two largest numbers", SAMPLING_TOPK, 2, -1, 1, nan4, un, top2n, 2);
}

// Draws at 1000 evenly spaced u: each token chosen in proportion to its probability, exactly.
static void test_counts(void) {
    int count[4] = {0};
    for (int i = 0; i < 1000; i++) count[choose(SAMPLING_WEIGHTED, 0, -1, 1, z4, (i + 0.5) / 1000)]++;
    CHECK(count[0] == 100 && count[1] == 200 && count[2] == 300 && count[3] == 400,
          "weighted over 1000 evenly spaced draws: %d %d %d %d, want 100 200 300 400", count[0], count[1], count[2],
          count[3]);
    int top[4] = {0};
    for (int i = 0; i < 1000; i++) top[choose(SAMPLING_TOPK, 3, -1, 1, z4, (i + 0.5) / 1000)]++;
    // Tokens 1 2 3 kept, 0.2 0.3 0.4 over 0.9, running sums 0.2222 0.5556 1: the draws
    // (i + 0.5) / 1000 below them are i <= 221 and i <= 555.
    CHECK(top[0] == 0 && top[1] == 222 && top[2] == 334 && top[3] == 444,
          "topk 3 over 1000 evenly spaced draws: %d %d %d %d, want 0 222 334 444", top[0], top[1], top[2], top[3]);
}

static void prompt_is(const char *text, int vocab, int bytes, const int *want, int n) {
    int got[64];
    int m = sampling_prompt(text, vocab, bytes, got);
    int same = m == n;
    for (int i = 0; same && i < n; i++) same = got[i] == want[i];
    CHECK(same && sampling_prompt(text, vocab, bytes, NULL) == n, "prompt '%s': %d tokens (first %d), want %d", text,
          m, m ? got[0] : -1, n);
}

static void test_prompt(void) {
    prompt_is("", 256, 1, NULL, 0);
    prompt_is("[1][415] |[29]", 500, 0, (const int[]){1, 415, 29}, 3);
    prompt_is("[7]", 256, 1, (const int[]){7}, 1);
    prompt_is("ROMEO:\\n", 256, 1, (const int[]){'R', 'O', 'M', 'E', 'O', ':', '\n'}, 7);
    prompt_is("a\\tb\\\\c\\x", 256, 1, (const int[]){'a', '\t', 'b', '\\', 'c', '\\', 'x'}, 7);
    prompt_is("[Enter ROMEO]", 256, 1, (const int[]){'[', 'E', 'n', 't', 'e', 'r', ' ', 'R', 'O', 'M', 'E', 'O', ']'}, 13);
    prompt_is("[1][2x]", 256, 1, (const int[]){'[', '1', ']', '[', '2', 'x', ']'}, 7);
    prompt_is("\xc3\xa9", 256, 1, (const int[]){0xc3, 0xa9}, 2);
}

int main(void) {
    for (int v = 0; v < 4; v++) z4[v] = logf(0.1f * (float)(v + 1));
    test_strategies();
    test_nucleus();
    test_counts();
    test_prompt();
    TEST_SUMMARY();
}
