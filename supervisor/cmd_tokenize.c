/* dsvisor tokenize: encode or decode with a model's tokenizer, one JSON value per line.
 *
 *   dsvisor tokenize (--model M | --tokenizer FILE) [--special] [--decode] < lines.jsonl
 *
 * Encoding reads one JSON string per line and writes {"ids":[...]}; with --decode it reads
 * one array of ids per line ([1,2,3] or {"ids":[1,2,3]}) and writes the text as a JSON
 * string. FILE is a tokenizer.json (its sibling tokenizer_config.json supplies BOS/EOS)
 * or a SentencePiece .model; M is a native model file or a Hugging Face folder (see
 * dse_model_resolve), whose embedded tokenizer is used. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "dse.h"

static void tokenize_usage(FILE *out) {
        fprintf(out,
                "usage: dsvisor tokenize (--model M | --tokenizer FILE) [--special] [--decode] < lines.jsonl\n"
                "  Encodes one JSON string per line and prints {\"ids\":[...]} per line.\n"
                "  --special   add BOS/EOS the way the model's own loader does\n"
                "  --decode    read one array of ids per line ([1,2] or {\"ids\":[1,2]}) and\n"
                "              print the decoded text as a JSON string\n"
                "  FILE: tokenizer.json (+ tokenizer_config.json beside it) or a SentencePiece .model\n"
                "  M: a native model file or a Hugging Face folder (its embedded tokenizer)\n");
}

static int hex4(const char *p, unsigned *ret) {
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
                char c = p[i];
                int d = c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
                if (d < 0)
                        return -EINVAL;
                v = v << 4 | (unsigned)d;
        }
        *ret = v;
        return 0;
}

static char *put_utf8(char *o, unsigned cp) {
        if (cp < 0x80) {
                *o++ = (char)cp;
        } else if (cp < 0x800) {
                *o++ = (char)(0xC0 | cp >> 6);
                *o++ = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
                *o++ = (char)(0xE0 | cp >> 12);
                *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
                *o++ = (char)(0x80 | (cp & 0x3F));
        } else {
                *o++ = (char)(0xF0 | cp >> 18);
                *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
                *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
                *o++ = (char)(0x80 | (cp & 0x3F));
        }
        return o;
}

/* Decodes a line holding one JSON string into out (which has room for len bytes), keeping
 * \u0000 as a NUL byte (cJSON cannot). Returns the byte length or -EINVAL. The bytes are
 * not checked for UTF-8 here: the tokenizer reports -EILSEQ. */
static long parse_json_string(const char *line, size_t len, char *out) {
        size_t i = 0;
        while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
                i++;
        if (i >= len || line[i++] != '"')
                return -EINVAL;
        char *o = out;
        for (;;) {
                if (i >= len)
                        return -EINVAL;
                char c = line[i++];
                if (c == '"')
                        break;
                if ((unsigned char)c < 0x20)
                        return -EINVAL;
                if (c != '\\') {
                        *o++ = c;
                        continue;
                }
                if (i >= len)
                        return -EINVAL;
                char e = line[i++];
                unsigned cp;
                switch (e) {
                case '"': *o++ = '"'; break;
                case '\\': *o++ = '\\'; break;
                case '/': *o++ = '/'; break;
                case 'b': *o++ = '\b'; break;
                case 'f': *o++ = '\f'; break;
                case 'n': *o++ = '\n'; break;
                case 'r': *o++ = '\r'; break;
                case 't': *o++ = '\t'; break;
                case 'u':
                        if (i + 4 > len || hex4(line + i, &cp) < 0)
                                return -EINVAL;
                        i += 4;
                        if (cp >= 0xD800 && cp <= 0xDBFF) {
                                unsigned lo;
                                if (i + 6 > len || line[i] != '\\' || line[i + 1] != 'u' || hex4(line + i + 2, &lo) < 0 ||
                                    lo < 0xDC00 || lo > 0xDFFF)
                                        return -EINVAL;
                                i += 6;
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                                return -EINVAL;
                        }
                        o = put_utf8(o, cp);
                        break;
                default:
                        return -EINVAL;
                }
        }
        while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
                i++;
        return i == len ? (long)(o - out) : -EINVAL;
}

/* Writes s as a JSON string: quotes, backslashes and control characters escaped, other
 * bytes (UTF-8) as they are. */
static void print_json_string(FILE *f, const char *s, size_t len) {
        fputc('"', f);
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                switch (c) {
                case '"': fputs("\\\"", f); break;
                case '\\': fputs("\\\\", f); break;
                case '\b': fputs("\\b", f); break;
                case '\f': fputs("\\f", f); break;
                case '\n': fputs("\\n", f); break;
                case '\r': fputs("\\r", f); break;
                case '\t': fputs("\\t", f); break;
                default:
                        if (c < 0x20)
                                fprintf(f, "\\u%04x", c);
                        else
                                fputc(c, f);
                }
        }
        fputc('"', f);
}

int dsv_tokenizer_load_arg(const char *model_arg, const char *tok_path, struct dse_tokenizer **ret_tok) {
        struct dse_diag diag = {{0}};
        int r;
        if (tok_path) {
                r = dse_tokenizer_load_file(tok_path, ret_tok, &diag);
                if (r < 0)
                        fprintf(stderr, "dsvisor: cannot load tokenizer '%s': %s\n", tok_path,
                                diag.msg[0] ? diag.msg : strerror(-r));
                return r;
        }
        char path[4096];
        struct dse_model *model = NULL;
        r = dse_model_resolve(model_arg, path, sizeof path, &diag);
        if (r >= 0)
                r = dse_model_open(path, 0, &model, &diag);
        if (r >= 0)
                r = dse_model_tokenizer(model, ret_tok, &diag);
        if (r < 0)
                fprintf(stderr, "dsvisor: cannot load the tokenizer of model '%s': %s\n", model_arg,
                        diag.msg[0] ? diag.msg : strerror(-r));
        dse_model_free(model);
        return r;
}

static int encode_line(const struct dse_tokenizer *tok, const char *line, size_t len, int special, long line_no,
                       int32_t **ids, size_t *cap) {
        char *text = malloc(len + 1);
        if (!text)
                return -ENOMEM;
        long n = parse_json_string(line, len, text);
        if (n < 0) {
                fprintf(stderr, "dsvisor: line %ld: expected one JSON string\n", line_no);
                free(text);
                return (int)n;
        }
        int r;
        for (;;) {
                r = dse_tokenizer_encode(tok, text, (size_t)n, special, *ids, *cap);
                if (r < 0 || (size_t)r <= *cap)
                        break;
                int32_t *bigger = realloc(*ids, (size_t)r * sizeof **ids);
                if (!bigger) {
                        r = -ENOMEM;
                        break;
                }
                *ids = bigger;
                *cap = (size_t)r;
        }
        free(text);
        if (r < 0) {
                fprintf(stderr, "dsvisor: line %ld: %s\n", line_no,
                        r == -EILSEQ ? "the text is not valid UTF-8" : strerror(-r));
                return r;
        }
        fputs("{\"ids\":[", stdout);
        for (int i = 0; i < r; i++)
                printf(i ? ",%d" : "%d", (*ids)[i]);
        fputs("]}\n", stdout);
        return 0;
}

static int decode_line(const struct dse_tokenizer *tok, const char *line, long line_no, char **buf, size_t *cap) {
        cJSON *j = cJSON_Parse(line);
        cJSON *arr = cJSON_IsObject(j) ? cJSON_GetObjectItem(j, "ids") : j;
        int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : -1;
        int32_t *ids = n >= 0 ? malloc((size_t)(n ? n : 1) * sizeof *ids) : NULL;
        int r = ids ? 0 : -EINVAL;
        for (int i = 0; i < n && r == 0; i++) {
                cJSON *v = cJSON_GetArrayItem(arr, i);
                if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > INT32_MAX ||
                    v->valuedouble != (double)(int32_t)v->valuedouble)
                        r = -EINVAL;
                else
                        ids[i] = (int32_t)v->valuedouble;
        }
        cJSON_Delete(j);
        if (r < 0) {
                fprintf(stderr, "dsvisor: line %ld: expected an array of token ids\n", line_no);
                free(ids);
                return r;
        }
        for (;;) {
                r = dse_tokenizer_decode(tok, ids, (size_t)n, *buf, *cap);
                if (r < 0 || (size_t)r <= *cap)
                        break;
                char *bigger = realloc(*buf, (size_t)r);
                if (!bigger) {
                        r = -ENOMEM;
                        break;
                }
                *buf = bigger;
                *cap = (size_t)r;
        }
        free(ids);
        if (r < 0) {
                fprintf(stderr, "dsvisor: line %ld: %s\n", line_no,
                        r == -EINVAL ? "a token id is out of range" : strerror(-r));
                return r;
        }
        print_json_string(stdout, *buf, (size_t)r);
        fputc('\n', stdout);
        return 0;
}

int dsv_cmd_tokenize(int argc, char **argv) {
        static const struct option opts[] = {
                {"model", required_argument, NULL, 'm'}, {"tokenizer", required_argument, NULL, 't'},
                {"special", no_argument, NULL, 's'},     {"decode", no_argument, NULL, 'd'},
                {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
        };
        const char *model_arg = NULL, *tok_path = NULL;
        int special = 0, decode = 0, c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                switch (c) {
                case 'm': model_arg = optarg; break;
                case 't': tok_path = optarg; break;
                case 's': special = 1; break;
                case 'd': decode = 1; break;
                case 'h': tokenize_usage(stdout); return 0;
                default: tokenize_usage(stderr); return 2;
                }
        }
        if (optind != argc || !model_arg == !tok_path) {
                fprintf(stderr, "dsvisor tokenize: give exactly one of --model and --tokenizer\n");
                tokenize_usage(stderr);
                return 2;
        }
        struct dse_tokenizer *tok = NULL;
        if (dsv_tokenizer_load_arg(model_arg, tok_path, &tok) < 0)
                return 1;
        if (isatty(STDOUT_FILENO))
                setvbuf(stdout, NULL, _IOLBF, 0);
        char *line = NULL, *text = NULL;
        size_t line_cap = 0, text_cap = 0, ids_cap = 0;
        int32_t *ids = NULL;
        ssize_t n;
        long line_no = 0;
        int r = 0;
        while (r == 0 && (n = getline(&line, &line_cap, stdin)) >= 0) {
                line_no++;
                while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                        line[--n] = '\0';
                if (n == 0)
                        continue;
                r = decode ? decode_line(tok, line, line_no, &text, &text_cap)
                           : encode_line(tok, line, (size_t)n, special, line_no, &ids, &ids_cap);
        }
        free(line);
        free(text);
        free(ids);
        dse_tokenizer_free(tok);
        if (fflush(stdout) != 0) {
                fprintf(stderr, "dsvisor: cannot write the output: %m\n");
                return 1;
        }
        return r < 0 ? 1 : 0;
}
