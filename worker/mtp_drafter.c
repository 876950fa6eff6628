/* The MTP drafter (see mtp_drafter.h). */
#include <errno.h>
#include <stdio.h>

#include "mtp_drafter.h"

/* Drafts only when everything but the sampled token is evaluated: the module starts
 * from the main model's hidden state at the last position, which a prompt still being
 * fed in chunks does not have yet. */
static int mtp_propose(void *self, int slot, const int32_t *tokens, int32_t n_tokens, int max_draft,
                       int32_t *draft) {
        struct spec_mtp *m = self;
        int seq = sched_slot_seq(m->s, slot);
        if (seq < 0 || n_tokens < 1 || dse_kv_seq_len(m->kv, seq) != n_tokens - 1)
                return 0;
        return dse_batch_mtp_draft(m->b, seq, tokens[n_tokens - 1], max_draft, draft, NULL);
}

const struct spec_drafter_ops spec_mtp_ops = {.name = "mtp", .propose = mtp_propose};

int spec_mtp_attach(struct spec_mtp *m, struct sched *s, struct dse_batch *b, struct dse_kv_cache *kv,
                    const struct spec_config *cfg, char *err, size_t err_size) {
        struct dse_diag diag = {{0}};
        int r = dse_batch_enable_mtp(b, &diag);
        if (r < 0) {
                snprintf(err, err_size, "--speculative mtp: %s", diag.msg[0] ? diag.msg : "cannot enable MTP");
                return r;
        }
        *m = (struct spec_mtp){s, b, kv};
        struct spec_drafter d = {&spec_mtp_ops, m};
        if ((r = sched_set_drafter(s, cfg, &d)) < 0)
                snprintf(err, err_size, "--speculative mtp: the scheduler refused the drafter");
        return r;
}
