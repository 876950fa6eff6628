/* The worker's logit penalties, each on its own with repetition penalty 1 (off): a
 * presence penalty lowers each token seen in the output once, a frequency penalty once
 * per time it was seen, neither touches prompt-only tokens, and each alone changes
 * which token is most likely. */
#include <stdint.h>

#include "sampling.h"
#include "t.h"

#define VOCAB 5

/* Prompt: token 4. Output so far: 0, 0, 1 (token 0 twice). */
static const int32_t seq[] = {4, 0, 0, 1};
static const float base[VOCAB] = {3.0f, 2.6f, 2.2f, 0.0f, 9.0f};

/* The most likely token among 0..3 (token 4, the prompt's, is left out). */
static int argmax_below_prompt(const float *l) {
        int best = 0;
        for (int i = 1; i < VOCAB - 1; i++)
                if (l[i] > l[best])
                        best = i;
        return best;
}

static int penalise(float presence, float frequency, float *logits) {
        struct sampling_scratch sc;
        memcpy(logits, base, sizeof base);
        int r = sampling_scratch_init(&sc, VOCAB);
        if (r < 0)
                return r;
        struct penalties p = {.repetition = 1.0f, .presence = presence, .frequency = frequency};
        sampling_apply_penalties(&sc, &p, seq, 1, 4, logits);
        sampling_scratch_done(&sc);
        return 0;
}

/* The penalised logits, exactly, and the choice among tokens 0..3 they lead to. */
static void expect(float presence, float frequency, const float want[VOCAB], int want_choice) {
        float l[VOCAB];
        ASSERT_OK(penalise(presence, frequency, l));
        for (int i = 0; i < VOCAB; i++)
                ASSERT_FLOAT_EQ(l[i], want[i]);
        ASSERT_EQ(argmax_below_prompt(l), want_choice);
}

TEST(no_penalty_leaves_the_logits) { expect(0.0f, 0.0f, base, 0); }

/* Token 0, seen twice, is lowered once; the prompt-only token 4 is left alone. */
TEST(presence_counts_each_output_token_once) {
        static const float want[VOCAB] = {2.0f, 2.6f - 1.0f, 2.2f, 0.0f, 9.0f};
        expect(1.0f, 0.0f, want, 2);
}

/* Token 0, seen twice, is lowered twice. */
TEST(frequency_counts_each_occurrence) {
        static const float want[VOCAB] = {2.0f, 2.6f - 0.5f, 2.2f, 0.0f, 9.0f};
        expect(0.0f, 0.5f, want, 2);
}

/* The same 0.5 as a presence penalty lowers token 0 only once: it stays the choice,
 * which is what tells the two penalties apart. */
TEST(presence_of_the_same_size_keeps_the_choice) {
        static const float want[VOCAB] = {2.5f, 2.6f - 0.5f, 2.2f, 0.0f, 9.0f};
        expect(0.5f, 0.0f, want, 0);
}

/* A negative penalty favours what was already said. */
TEST(negative_presence_favours_seen_tokens) {
        static const float want[VOCAB] = {4.0f, 2.6f + 1.0f, 2.2f, 0.0f, 9.0f};
        expect(-1.0f, 0.0f, want, 0);
}
