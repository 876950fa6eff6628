/* dsvisor-bench grammar (grammar_bench.c): argv as main's, argv[1] "grammar". */
#ifndef DSV_BENCH_GRAMMAR_BENCH_H
#define DSV_BENCH_GRAMMAR_BENCH_H

int dsv_bench_grammar(int argc, char **argv);

#endif
