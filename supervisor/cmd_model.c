/* dsvisor convert: a Hugging Face folder or a GGUF file -> a native model file.
 * dsvisor verify:  full validation of a native model file, checksums included, and with
 *                  --values a scan of every value for NaN and Inf. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "commands.h"
#include "dse.h"

static void log_to_stderr(enum dse_log_level level, const char *msg, void *user) {
        static const char *const prefix[DSE_LOG_LEVEL_COUNT] = {"<3>", "<4>", "<6>", "<7>"};
        (void)user;
        if (level <= DSE_LOG_INFO)
                fprintf(stderr, "%sdsvisor: %s\n", prefix[level], msg);
}

static int mkdir_p(const char *dir) {
        char buf[4096];
        if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
                return -ENAMETOOLONG;
        for (char *p = buf + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = 0;
                if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static void convert_usage(FILE *out) {
        fprintf(out,
                "usage: dsvisor convert --model-path HF_DIR|FILE.gguf --output-dir OUT [--quant-format FORMAT] [--name FILE]\n"
                "  Converts a Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer files)\n"
                "  or a llama.cpp GGUF file (llama, qwen2, deepseek2) into OUT/model.dse (or OUT/FILE), streaming one\n"
                "  tensor at a time. GGUF Q8_0/Q5_0/Q4_0 become native Q8/Q4, other quantized\n"
                "  types F32, all without changing a value (engine/FORMAT.md, GGUF import).\n"
                "  FORMAT: auto (default: keep the checkpoint's BF16/F16/FP8/AWQ/GPTQ weights),\n"
                "          bf16, int8, int4 (group 32, projections only), awq, gptq (require that format)\n");
}

int dsv_cmd_convert(int argc, char **argv) {
        static const struct option opts[] = {
                {"model-path", required_argument, NULL, 'm'}, {"output-dir", required_argument, NULL, 'o'},
                {"quant-format", required_argument, NULL, 'q'}, {"name", required_argument, NULL, 'n'},
                {"help", no_argument, NULL, 'h'},           {0},
        };
        const char *model = NULL, *outdir = NULL, *quant = "auto", *name = "model.dse";
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "m:o:q:n:h", opts, NULL)) != -1) {
                switch (c) {
                case 'm': model = optarg; break;
                case 'o': outdir = optarg; break;
                case 'q': quant = optarg; break;
                case 'n': name = optarg; break;
                case 'h': convert_usage(stdout); return 0;
                default: convert_usage(stderr); return 2;
                }
        }
        if (!model || !outdir || optind != argc || strchr(name, '/')) {
                convert_usage(stderr);
                return 2;
        }
        int r = mkdir_p(outdir);
        if (r < 0) {
                fprintf(stderr, "<3>dsvisor: cannot create '%s': %s\n", outdir, strerror(-r));
                return 1;
        }
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", outdir, name) >= (int)sizeof path) {
                fprintf(stderr, "<3>dsvisor: output path too long\n");
                return 1;
        }
        struct dse_diag diag = {{0}};
        dse_log_set(log_to_stderr, NULL);
        r = dse_model_convert_hf(model, path, quant, &diag);
        if (r < 0) {
                fprintf(stderr, "<3>dsvisor: convert '%s' failed: %s\n", model, diag.msg[0] ? diag.msg : strerror(-r));
                return 1;
        }
        /* open what was written: the loader's full structural validation (header, table,
         * shapes against the hyper-parameters) without reading the tensors, so peak
         * memory stays the converter's; `dsvisor verify` checks the checksums */
        struct dse_model *m;
        r = dse_model_open(path, 0, &m, &diag);
        if (r < 0) {
                fprintf(stderr, "<3>dsvisor: '%s' does not load: %s\n", path, diag.msg[0] ? diag.msg : strerror(-r));
                return 1;
        }
        char line[1024];
        dse_model_describe(m, line, sizeof line);
        printf("wrote %s\n", line);
        dse_model_free(m);
        return 0;
}

int dsv_cmd_verify(int argc, char **argv) {
        int values = argc == 3 && strcmp(argv[1], "--values") == 0;
        const char *path = argv[argc - 1];
        if ((argc != 2 && !values) || path[0] == '-') {
                FILE *out = argc == 2 && strcmp(argv[1], "--help") == 0 ? stdout : stderr;
                fprintf(out, "usage: dsvisor verify [--values] MODEL\n"
                             "  Validates a native model file (header, table, shapes against the\n"
                             "  hyper-parameters) and checks every tensor's CRC32C. --values also\n"
                             "  scans every weight, norm and scale for NaN and Inf (a warning per tensor).\n");
                return out == stdout ? 0 : 2;
        }
        struct dse_diag diag = {{0}};
        struct dse_model *m;
        int r = dse_model_open(path, 0, &m, &diag);
        if (r < 0) {
                fprintf(stderr, "<3>dsvisor: %s\n", diag.msg[0] ? diag.msg : strerror(-r));
                return 1;
        }
        r = dse_model_verify(m, &diag);
        size_t n_bad = 0;
        if (r == 0 && values) {
                dse_log_set(log_to_stderr, NULL);
                r = dse_model_verify_values(m, &n_bad);
        }
        char line[1024];
        dse_model_describe(m, line, sizeof line);
        dse_model_free(m);
        if (r < 0) {
                fprintf(stderr, "<3>dsvisor: %s\n", diag.msg[0] ? diag.msg : strerror(-r));
                return 1;
        }
        if (n_bad)
                printf("ok %s; %zu tensors hold NaN or Inf values\n", line, n_bad);
        else
                printf("ok %s%s\n", line, values ? "; every value finite" : "");
        return 0;
}
