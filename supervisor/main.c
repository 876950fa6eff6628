/* dsvisor: one binary, one subcommand per job (git style). */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "dse.h"
#include "sup.h"

static const struct dsv_command commands[] = {
        {"cpuinfo", dsv_cmd_cpuinfo, "print the CPU features detected and the kernel level in use"},
        {"tokenize", dsv_cmd_tokenize, "encode JSON strings to token ids (or decode ids) with a model's tokenizer"},
        {"grammar", dsv_cmd_grammar, "compile a JSON Schema to a grammar; check JSON lines against its token masks"},
        {"convert", dsv_cmd_convert, "convert a Hugging Face checkpoint folder into a native model file"},
        {"verify", dsv_cmd_verify, "validate a native model file and check every tensor's checksum"},
        {"plan", dsv_cmd_plan, "dry run: where each instance would run (nodes, cores, threads)"},
        {"doctor", dsv_cmd_doctor, "check the host tuning (cgroups, THP, HugePages, IRQs, limits) and say why"},
        {"logits", dsv_cmd_logits, "run token ids through a model: raw logits and the greedy continuation"},
        {"run", dsv_cmd_run, "generate text from a prompt or a chat message, streamed to stdout"},
        {"start", dsv_cmd_start, "serve: run the worker instances and the HTTP gateway (foreground)"},
        {"status", dsv_cmd_status, "show the running supervisor's instances (--json for tools)"},
        {"stop", dsv_cmd_stop, "drain and stop the running supervisor"},
};

static void usage(FILE *out) {
        fprintf(out, "usage: dsvisor COMMAND [ARGS...]\n\ncommands:\n");
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
        fprintf(out, "\nRun 'dsvisor COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv) {
        if (argc < 2) {
                usage(stderr);
                return 2;
        }
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
                usage(stdout);
                return 0;
        }
        if (strcmp(argv[1], "--version") == 0) {
                struct dse_cpu_info cpu;
                struct dse_diag diag = {{0}};
                printf("dsvisor %s\n", DSV_VERSION);
                if (dse_cpu_detect(&cpu, &diag) < 0) {
                        fprintf(stderr, "dsvisor: %s\n", diag.msg);
                        return 1;
                }
                printf("cpu level: %s (detected %s)\n", dse_cpu_level_to_string(cpu.level),
                       dse_cpu_level_to_string(cpu.detected));
                return 0;
        }
        /* The long-running supervisor runs without glibc's per-thread malloc cache, which
         * only an exec can switch off (malloc_env.c); the other commands are short. */
        if (strcmp(argv[1], "start") == 0)
                (void)sup_malloc_tcache_cap(argv);
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (strcmp(argv[1], commands[i].name) == 0)
                        return commands[i].run(argc - 1, argv + 1);
        fprintf(stderr, "dsvisor: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 2;
}
