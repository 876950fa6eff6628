/* The MTP drafter (speculate.h's ops table over the engine's MTP module): for a
 * DeepSeek-V3 model with a multi-token prediction module, a sequence's drafts are the
 * module's greedy chain from the main model's last hidden state (dse_batch_mtp_draft).
 * The engine keeps the module's KV rows and the hidden states it needs across
 * verification and rollback, so the drafter keeps no state per request. */
#ifndef DSV_WORKER_MTP_DRAFTER_H
#define DSV_WORKER_MTP_DRAFTER_H

#include "dse.h"
#include "scheduler.h"
#include "speculate.h"

struct spec_mtp {
        struct sched *s;
        struct dse_batch *b;
        struct dse_kv_cache *kv;
};

extern const struct spec_drafter_ops spec_mtp_ops;

/* Enables MTP on the scheduler's batch b (over cache kv) and makes it s's drafter with
 * bounds cfg (method SPEC_MTP); m must outlive the scheduler. -EOPNOTSUPP for a model
 * without an MTP module, with a message in err naming it. */
int spec_mtp_attach(struct spec_mtp *m, struct sched *s, struct dse_batch *b, struct dse_kv_cache *kv,
                    const struct spec_config *cfg, char *err, size_t err_size);

#endif
