/* gen_llama_st: writes a synthetic BF16 llama checkpoint folder (config.json +
 * model.safetensors) of a chosen size, for measuring the converter's peak memory
 * (bench/convert_rss.sh). Weights are pseudo-random BF16 values in [-0.5, 0.5); they
 * are streamed out in 1 MiB blocks, so the generator itself needs almost no memory.
 *
 *     gen_llama_st OUT_DIR [N_LAYERS [HIDDEN [INTERMEDIATE [VOCAB]]]]
 *
 * Defaults: 8 layers, hidden 4096, intermediate 11008, vocab 32000 (about 3.8 GB). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_clock.h"

struct tensor {
        char name[96];
        long long rows, cols; /* cols 0: 1-D */
        unsigned long long begin, end;
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint16_t next_bf16(void) {
        float f = (float)(bench_xorshift64(&rng) >> 40) / (float)(1 << 24) - 0.5f;
        uint32_t u;
        memcpy(&u, &f, 4);
        return (uint16_t)(u >> 16);
}

static int add(struct tensor *t, int *n, unsigned long long *off, const char *name, long long rows, long long cols) {
        struct tensor *x = &t[(*n)++];
        snprintf(x->name, sizeof x->name, "%s", name);
        x->rows = rows;
        x->cols = cols;
        x->begin = *off;
        *off += (unsigned long long)rows * (unsigned long long)(cols ? cols : 1) * 2;
        x->end = *off;
        return 0;
}

int main(int argc, char **argv) {
        if (argc < 2) {
                fprintf(stderr, "usage: gen_llama_st OUT_DIR [N_LAYERS [HIDDEN [INTERMEDIATE [VOCAB]]]]\n");
                return 2;
        }
        const char *dir = argv[1];
        int layers = argc > 2 ? atoi(argv[2]) : 8;
        long long hidden = argc > 3 ? atoll(argv[3]) : 4096, inter = argc > 4 ? atoll(argv[4]) : 11008;
        long long vocab = argc > 5 ? atoll(argv[5]) : 32000;
        int heads = (int)(hidden / 128 > 0 ? hidden / 128 : 1);
        if (layers <= 0 || hidden <= 0 || inter <= 0 || vocab <= 0 || hidden % heads) {
                fprintf(stderr, "gen_llama_st: bad dimensions\n");
                return 2;
        }
        if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
                fprintf(stderr, "gen_llama_st: cannot create '%s': %m\n", dir);
                return 1;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *cfg = fopen(path, "w");
        if (!cfg) {
                fprintf(stderr, "gen_llama_st: cannot create '%s': %m\n", path);
                return 1;
        }
        fprintf(cfg,
                "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %lld,"
                " \"intermediate_size\": %lld, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,"
                " \"num_key_value_heads\": %d, \"vocab_size\": %lld, \"rms_norm_eps\": 1e-05,"
                " \"rope_theta\": 10000.0, \"max_position_embeddings\": 4096, \"tie_word_embeddings\": false,"
                " \"torch_dtype\": \"bfloat16\", \"bos_token_id\": 1, \"eos_token_id\": 2}\n",
                hidden, inter, layers, heads, heads, vocab);
        fclose(cfg);

        int cap = 3 + layers * 9, n = 0;
        struct tensor *t = calloc((size_t)cap, sizeof *t);
        unsigned long long off = 0;
        char name[96];
        add(t, &n, &off, "model.embed_tokens.weight", vocab, hidden);
        for (int l = 0; l < layers; l++) {
                static const char *const attn[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
                snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
                add(t, &n, &off, name, hidden, 0);
                for (int a = 0; a < 4; a++) {
                        snprintf(name, sizeof name, "model.layers.%d.self_attn.%s.weight", l, attn[a]);
                        add(t, &n, &off, name, hidden, hidden);
                }
                snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
                add(t, &n, &off, name, hidden, 0);
                snprintf(name, sizeof name, "model.layers.%d.mlp.gate_proj.weight", l);
                add(t, &n, &off, name, inter, hidden);
                snprintf(name, sizeof name, "model.layers.%d.mlp.up_proj.weight", l);
                add(t, &n, &off, name, inter, hidden);
                snprintf(name, sizeof name, "model.layers.%d.mlp.down_proj.weight", l);
                add(t, &n, &off, name, hidden, inter);
        }
        add(t, &n, &off, "model.norm.weight", hidden, 0);
        add(t, &n, &off, "lm_head.weight", vocab, hidden);

        /* header JSON, padded with spaces to a multiple of 8 as the reference writer does */
        size_t hcap = (size_t)n * 200 + 64, hl = 0;
        char *h = malloc(hcap);
        hl += (size_t)snprintf(h + hl, hcap - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
        for (int i = 0; i < n; i++) {
                if (t[i].cols)
                        hl += (size_t)snprintf(h + hl, hcap - hl,
                                               ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld,%lld],\"data_offsets\":[%llu,%llu]}",
                                               t[i].name, t[i].rows, t[i].cols, t[i].begin, t[i].end);
                else
                        hl += (size_t)snprintf(h + hl, hcap - hl,
                                               ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld],\"data_offsets\":[%llu,%llu]}",
                                               t[i].name, t[i].rows, t[i].begin, t[i].end);
        }
        h[hl++] = '}';
        while (hl % 8)
                h[hl++] = ' ';

        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
                fprintf(stderr, "gen_llama_st: cannot create '%s': %m\n", path);
                return 1;
        }
        uint8_t len[8];
        for (int i = 0; i < 8; i++)
                len[i] = (uint8_t)((uint64_t)hl >> (8 * i));
        int ok = write(fd, len, 8) == 8 && write(fd, h, hl) == (ssize_t)hl;
        enum { BLOCK = 1 << 19 }; /* BF16 values per write: 1 MiB */
        uint16_t *buf = malloc(BLOCK * sizeof *buf);
        for (unsigned long long done = 0; ok && done < off / 2;) {
                size_t k = off / 2 - done < BLOCK ? (size_t)(off / 2 - done) : BLOCK;
                for (size_t i = 0; i < k; i++)
                        buf[i] = next_bf16();
                ok = write(fd, buf, k * 2) == (ssize_t)(k * 2);
                done += k;
        }
        if (!ok || close(fd) < 0) {
                fprintf(stderr, "gen_llama_st: writing '%s' failed: %m\n", path);
                return 1;
        }
        printf("%s: %d tensors, %.2f GB of BF16 weights, largest tensor %.1f MiB\n", dir, n, off / 1e9,
               (double)(vocab * hidden * 2 > inter * hidden * 2 ? vocab * hidden * 2 : inter * hidden * 2) / (1 << 20));
        free(buf);
        free(h);
        free(t);
        return 0;
}
