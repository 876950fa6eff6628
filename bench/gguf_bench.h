/* dsvisor-bench gguf (gguf_bench.c): argv as main's, argv[1] "gguf". The preset's
 * hyper-parameters come from model_bench.c. */
#ifndef DSV_BENCH_GGUF_BENCH_H
#define DSV_BENCH_GGUF_BENCH_H

#include "dse_internal.h"

int dsv_bench_gguf(int argc, char **argv);

/* The hyper-parameters of a bench preset (model_bench.c); -EINVAL for an unknown name. */
int dsv_bench_preset_hparams(const char *name, struct dse_hparams *hp);

#endif
