/* safetensors reader: an 8-byte little-endian header length, a JSON header
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {...}}, then the data section. Every entry is checked before any data
 * is read; data is read one range at a time with pread (the converter streams). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../internal.h"
#include "../../utf8.h"
#include "../format.h"

#define ST_HEADER_MAX (100u << 20) /* the reference implementation's limit */

static const struct {
        const char *name;
        size_t size;
} st_dtypes[DSE_ST_DTYPE_COUNT] = {
        [DSE_ST_F64] = {"F64", 8},         [DSE_ST_F32] = {"F32", 4},   [DSE_ST_F16] = {"F16", 2},
        [DSE_ST_BF16] = {"BF16", 2},       [DSE_ST_F8_E4M3] = {"F8_E4M3", 1},
        [DSE_ST_F8_E5M2] = {"F8_E5M2", 1}, [DSE_ST_I64] = {"I64", 8},   [DSE_ST_I32] = {"I32", 4},
        [DSE_ST_I16] = {"I16", 2},         [DSE_ST_I8] = {"I8", 1},     [DSE_ST_U8] = {"U8", 1},
        [DSE_ST_BOOL] = {"BOOL", 1},
};

const char *dse__st_dtype_to_string(enum dse__st_dtype dtype) {
        return dtype >= 0 && dtype < DSE_ST_DTYPE_COUNT ? st_dtypes[dtype].name : "?";
}

size_t dse__st_dtype_size(enum dse__st_dtype dtype) {
        return dtype >= 0 && dtype < DSE_ST_DTYPE_COUNT ? st_dtypes[dtype].size : 0;
}

static int cmp_begin(const void *a, const void *b) {
        const struct dse__st_tensor *x = a, *y = b;
        return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

static int cmp_name(const void *a, const void *b) {
        return strcmp(((const struct dse__st_tensor *)a)->name, ((const struct dse__st_tensor *)b)->name);
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static int json_u64(const cJSON *v, uint64_t *ret) {
        if (!cJSON_IsNumber(v))
                return 0;
        double d = v->valuedouble;
        if (!(d >= 0) || d > 9007199254740992.0 || d != floor(d))
                return 0;
        *ret = (uint64_t)d;
        return 1;
}

static int parse_entry(const cJSON *item, uint64_t data_size, const char *what, struct dse__st_tensor *t,
                       struct dse_diag *reterr) {
        const char *name = item->string;
        if (!name || !*name || strlen(name) >= DSE_TENSOR_NAME_MAX)
                return dse__fail(reterr, -EBADMSG, "%s: tensor name '%.64s' is empty or longer than %d bytes", what,
                                 name ? name : "", DSE_TENSOR_NAME_MAX - 1);
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
        if (!cJSON_IsObject(item))
                return dse__fail(reterr, -EBADMSG, "%s: tensor '%s': entry is not an object", what, name);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
        const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
                return dse__fail(reterr, -EBADMSG, "%s: tensor '%s': needs dtype, shape and data_offsets", what, name);
        t->dtype = DSE_ST_DTYPE_COUNT;
        for (int d = 0; d < DSE_ST_DTYPE_COUNT; d++)
                if (strcmp(dt->valuestring, st_dtypes[d].name) == 0)
                        t->dtype = d;
        if (t->dtype == DSE_ST_DTYPE_COUNT)
                return dse__fail(reterr, -EOPNOTSUPP, "%s: tensor '%s': dtype '%.32s' is not supported", what, name,
                                 dt->valuestring);
        int n_dims = cJSON_GetArraySize(shape);
        if (n_dims > DSE_TENSOR_MAX_DIMS)
                return dse__fail(reterr, -EOPNOTSUPP, "%s: tensor '%s': %d dimensions (at most %d)", what, name,
                                 n_dims, DSE_TENSOR_MAX_DIMS);
        t->n_dims = n_dims;
        uint64_t numel = 1;
        for (int i = 0; i < n_dims; i++) {
                uint64_t d;
                if (!json_u64(cJSON_GetArrayItem(shape, i), &d) || d > INT64_MAX)
                        return dse__fail(reterr, -EBADMSG, "%s: tensor '%s': bad shape", what, name);
                t->shape[i] = (int64_t)d;
                if (d && numel > UINT64_MAX / d)
                        return dse__fail(reterr, -EBADMSG, "%s: tensor '%s': shape overflows", what, name);
                numel *= d;
        }
        uint64_t begin, end;
        if (cJSON_GetArraySize(offs) != 2 || !json_u64(cJSON_GetArrayItem(offs, 0), &begin) ||
            !json_u64(cJSON_GetArrayItem(offs, 1), &end) || begin > end)
                return dse__fail(reterr, -EBADMSG, "%s: tensor '%s': bad data_offsets", what, name);
        size_t esize = st_dtypes[t->dtype].size;
        if (numel > UINT64_MAX / esize || numel * esize != end - begin)
                return dse__fail(reterr, -EBADMSG,
                                 "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, shape and dtype need %llu",
                                 what, name, (unsigned long long)begin, (unsigned long long)end,
                                 (unsigned long long)(end - begin), (unsigned long long)(numel * esize));
        if (end > data_size)
                return dse__fail(reterr, -EBADMSG,
                                 "%s: tensor '%s': data_offsets end %llu past the end of the data (%llu bytes)", what,
                                 name, (unsigned long long)end, (unsigned long long)data_size);
        t->begin = begin;
        t->end = end;
        return 0;
}

/* __metadata__ is a map of strings ({"format": "pt"}); the reference reader refuses
 * anything else. */
static int check_metadata(const cJSON *md, const char *what, struct dse_diag *reterr) {
        if (!cJSON_IsObject(md))
                return dse__fail(reterr, -EBADMSG, "%s: __metadata__ is not a JSON object", what);
        for (const cJSON *e = md->child; e; e = e->next)
                if (!cJSON_IsString(e))
                        return dse__fail(reterr, -EBADMSG, "%s: __metadata__ entry '%.64s' is not a string", what,
                                         e->string ? e->string : "");
        return 0;
}

int dse__st_parse_header(const char *json, size_t len, uint64_t data_size, const char *what,
                         struct dse__st_tensor **ret_tensors, size_t *ret_n, struct dse_diag *reterr) {
        if (!json || !what || !ret_tensors || !ret_n)
                return -EINVAL;
        /* the reference reader refuses a header that does not open the JSON object at its
         * first byte or is not UTF-8 */
        if (len == 0 || json[0] != '{')
                return dse__fail(reterr, -EBADMSG, "%s: safetensors header does not start with '{'", what);
        if (!dse__utf8_valid(json, len))
                return dse__fail(reterr, -EBADMSG, "%s: safetensors header is not valid UTF-8 (at byte %zu)", what,
                                 dse__utf8_valid_prefix(json, len));
        cJSON *root = cJSON_ParseWithLength(json, len);
        if (!root)
                return dse__fail(reterr, -EBADMSG, "%s: malformed safetensors JSON header", what);
        int r = 0;
        struct dse__st_tensor *v = NULL;
        size_t n = 0;
        if (!cJSON_IsObject(root)) {
                r = dse__fail(reterr, -EBADMSG, "%s: safetensors header is not a JSON object", what);
                goto out;
        }
        size_t cap = (size_t)cJSON_GetArraySize(root);
        v = calloc(cap ? cap : 1, sizeof *v);
        if (!v) {
                r = -ENOMEM;
                goto out;
        }
        for (const cJSON *item = root->child; item; item = item->next) {
                if (item->string && strcmp(item->string, "__metadata__") == 0) {
                        if ((r = check_metadata(item, what, reterr)) < 0)
                                goto out;
                        continue;
                }
                if ((r = parse_entry(item, data_size, what, &v[n], reterr)) < 0)
                        goto out;
                n++;
        }
        qsort(v, n, sizeof *v, cmp_begin);
        for (size_t i = 1; i < n; i++)
                if (v[i].begin < v[i - 1].end) {
                        r = dse__fail(reterr, -EBADMSG, "%s: tensors '%s' and '%s' overlap", what, v[i - 1].name,
                                      v[i].name);
                        goto out;
                }
        qsort(v, n, sizeof *v, cmp_name);
        for (size_t i = 1; i < n; i++)
                if (strcmp(v[i].name, v[i - 1].name) == 0) {
                        r = dse__fail(reterr, -EBADMSG, "%s: tensor '%s' appears twice", what, v[i].name);
                        goto out;
                }
out:
        cJSON_Delete(root);
        if (r < 0) {
                free(v);
                return r;
        }
        *ret_tensors = v;
        *ret_n = n;
        return 0;
}

/* ---- a folder's shard set ------------------------------------------------------- */

struct st_file {
        char *path;
        int fd;
        uint64_t data_start; /* absolute offset of the data section */
};

struct dse__st_set {
        struct st_file *files;
        int n_files;
        struct dse__st_tensor *tensors; /* sorted by name */
        size_t n;
        const struct dse__st_source *source; /* a set of another format's tensors, or NULL */
        void *source_ctx;
};

void dse__st_close(struct dse__st_set *set) {
        if (!set)
                return;
        for (int i = 0; i < set->n_files; i++) {
                if (set->files[i].fd >= 0)
                        close(set->files[i].fd);
                free(set->files[i].path);
        }
        free(set->files);
        free(set->tensors);
        if (set->source)
                set->source->close(set->source_ctx);
        free(set);
}

static int read_full(int fd, void *buf, size_t n, uint64_t off) {
        uint8_t *p = buf;
        while (n) {
                ssize_t k = pread(fd, p, n, (off_t)off);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -EBADMSG;
                p += k;
                n -= (size_t)k;
                off += (uint64_t)k;
        }
        return 0;
}

/* The tensors of one file must cover its data section exactly, in offset order: no
 * byte before the first, between two or after the last (overlaps are refused by the
 * header parser). The reference reader refuses such files; a gap would also mean the
 * header lost a tensor. Sorts v by offset. */
static int check_tiling(struct dse__st_tensor *v, size_t n, uint64_t data_size, const char *path,
                        struct dse_diag *reterr) {
        qsort(v, n, sizeof *v, cmp_begin);
        uint64_t at = 0;
        for (size_t i = 0; i < n; i++) {
                if (v[i].begin != at)
                        return dse__fail(reterr, -EBADMSG,
                                         "%s: data bytes [%llu, %llu) %s%s%s tensor '%s' belong to no tensor: "
                                         "data_offsets must tile the data section",
                                         path, (unsigned long long)at, (unsigned long long)v[i].begin,
                                         i ? "between tensor '" : "before", i ? v[i - 1].name : "", i ? "' and" : "",
                                         v[i].name);
                at = v[i].end;
        }
        if (at != data_size)
                return dse__fail(reterr, -EBADMSG,
                                 "%s: %llu trailing bytes after %s%s%s belong to no tensor: data_offsets must tile "
                                 "the data section",
                                 path, (unsigned long long)(data_size - at), n ? "tensor '" : "an empty header",
                                 n ? v[n - 1].name : "", n ? "'" : "");
        return 0;
}

/* Opens one safetensors file and appends its tensors to the set. */
static int add_file(struct dse__st_set *set, const char *path, struct dse_diag *reterr) {
        struct st_file *files = realloc(set->files, (size_t)(set->n_files + 1) * sizeof *files);
        if (!files)
                return -ENOMEM;
        set->files = files;
        struct st_file *f = &files[set->n_files];
        f->path = strdup(path);
        f->fd = -1;
        if (!f->path)
                return -ENOMEM;
        set->n_files++;
        f->fd = dse__open_input(path, reterr);
        if (f->fd < 0)
                return f->fd;
        struct stat st;
        if (fstat(f->fd, &st) < 0)
                return dse__fail(reterr, -errno, "cannot stat '%s': %s", path, strerror(errno));
        uint64_t size = (uint64_t)st.st_size;
        uint8_t lenbuf[8];
        if (size < 8)
                return dse__fail(reterr, -EBADMSG, "%s: truncated: %llu bytes, no safetensors header", path,
                                 (unsigned long long)size);
        int r = read_full(f->fd, lenbuf, 8, 0);
        if (r < 0)
                return dse__fail(reterr, r, "%s: cannot read the header length", path);
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--)
                hlen = hlen << 8 | lenbuf[i];
        if (hlen > size - 8)
                return dse__fail(reterr, -EBADMSG, "%s: header length %llu is larger than the file (%llu bytes)", path,
                                 (unsigned long long)hlen, (unsigned long long)size);
        if (hlen > ST_HEADER_MAX)
                return dse__fail(reterr, -EBADMSG, "%s: header length %llu exceeds %u bytes", path,
                                 (unsigned long long)hlen, ST_HEADER_MAX);
        char *json = malloc(hlen ? hlen : 1);
        if (!json)
                return -ENOMEM;
        if ((r = read_full(f->fd, json, hlen, 8)) < 0) {
                free(json);
                return dse__fail(reterr, r, "%s: cannot read the header", path);
        }
        f->data_start = 8 + hlen;
        struct dse__st_tensor *v;
        size_t n;
        r = dse__st_parse_header(json, hlen, size - 8 - hlen, path, &v, &n, reterr);
        free(json);
        if (r == 0 && (r = check_tiling(v, n, size - 8 - hlen, path, reterr)) < 0)
                free(v);
        if (r < 0)
                return r;
        struct dse__st_tensor *all = realloc(set->tensors, (set->n + n + 1) * sizeof *all);
        if (!all) {
                free(v);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
                v[i].file = set->n_files - 1;
        memcpy(all + set->n, v, n * sizeof *v);
        free(v);
        set->tensors = all;
        set->n += n;
        return 0;
}

static int read_small_file(const char *path, char **ret_buf, size_t *ret_len, struct dse_diag *reterr) {
        int fd = dse__open_input(path, reterr);
        if (fd < 0)
                return fd;
        struct stat st;
        int r = 0;
        char *buf = NULL;
        if (fstat(fd, &st) < 0) {
                r = dse__fail(reterr, -errno, "cannot stat '%s': %s", path, strerror(errno));
                goto out;
        }
        if ((uint64_t)st.st_size > (256u << 20)) {
                r = dse__fail(reterr, -EFBIG, "%s: %lld bytes is too large", path, (long long)st.st_size);
                goto out;
        }
        buf = malloc((size_t)st.st_size + 1);
        if (!buf) {
                r = -ENOMEM;
                goto out;
        }
        if ((r = read_full(fd, buf, (size_t)st.st_size, 0)) < 0) {
                r = dse__fail(reterr, r, "cannot read '%s'", path);
                goto out;
        }
        buf[st.st_size] = 0;
        *ret_buf = buf;
        *ret_len = (size_t)st.st_size;
        buf = NULL;
out:
        free(buf);
        close(fd);
        return r;
}

/* model.safetensors.index.json: {"weight_map": {"tensor": "file", ...}}. Opens each
 * file once and checks every mapped tensor is in the file the index names. */
static int open_index(struct dse__st_set *set, const char *dir, const char *index_path, struct dse_diag *reterr) {
        char *json = NULL;
        size_t len = 0;
        int r = read_small_file(index_path, &json, &len, reterr);
        if (r < 0)
                return r;
        cJSON *root = cJSON_ParseWithLength(json, len);
        free(json);
        if (!root)
                return dse__fail(reterr, -EBADMSG, "%s: malformed JSON", index_path);
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
        if (!cJSON_IsObject(map)) {
                r = dse__fail(reterr, -EBADMSG, "%s: no 'weight_map' object", index_path);
                goto out;
        }
        char **names = NULL;
        int n_names = 0;
        for (const cJSON *e = map->child; e; e = e->next) {
                if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || strcmp(e->valuestring, "..") == 0 ||
                    !*e->valuestring) {
                        r = dse__fail(reterr, -EBADMSG, "%s: tensor '%s': bad file name", index_path,
                                      e->string ? e->string : "");
                        break;
                }
                int seen = 0;
                for (int i = 0; i < n_names && !seen; i++)
                        seen = strcmp(names[i], e->valuestring) == 0;
                if (seen)
                        continue;
                char **nn = realloc(names, (size_t)(n_names + 1) * sizeof *nn);
                if (!nn) {
                        r = -ENOMEM;
                        break;
                }
                names = nn;
                names[n_names++] = e->valuestring;
        }
        for (int i = 0; r == 0 && i < n_names; i++) {
                char path[4096];
                if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path)
                        r = dse__fail(reterr, -ENAMETOOLONG, "%s: path too long", names[i]);
                else
                        r = add_file(set, path, reterr);
        }
        free(names);
        if (r < 0)
                goto out;
        qsort(set->tensors, set->n, sizeof *set->tensors, cmp_name);
        for (const cJSON *e = map->child; e; e = e->next) {
                const struct dse__st_tensor *t = dse__st_find(set, e->string);
                const char *file = t ? strrchr(set->files[t->file].path, '/') + 1 : NULL;
                if (!t || strcmp(file, e->valuestring) != 0) {
                        r = dse__fail(reterr, -EBADMSG, "%s: tensor '%s' is not in '%s'", index_path, e->string,
                                      e->valuestring);
                        goto out;
                }
        }
out:
        cJSON_Delete(root);
        return r;
}

int dse__st_open_dir(const char *dir, struct dse__st_set **ret_set, struct dse_diag *reterr) {
        if (!dir || !ret_set)
                return -EINVAL;
        struct dse__st_set *set = calloc(1, sizeof *set);
        if (!set)
                return -ENOMEM;
        char path[4096];
        int r;
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        if (access(path, F_OK) == 0) {
                r = open_index(set, dir, path, reterr);
        } else {
                snprintf(path, sizeof path, "%s/model.safetensors", dir);
                if (access(path, F_OK) != 0)
                        r = dse__fail(reterr, -ENOENT, "%s: no model.safetensors or model.safetensors.index.json", dir);
                else
                        r = add_file(set, path, reterr);
                if (r == 0)
                        qsort(set->tensors, set->n, sizeof *set->tensors, cmp_name);
        }
        for (size_t i = 1; r == 0 && i < set->n; i++)
                if (strcmp(set->tensors[i].name, set->tensors[i - 1].name) == 0)
                        r = dse__fail(reterr, -EBADMSG, "%s: tensor '%s' is in two shards", dir, set->tensors[i].name);
        if (r < 0) {
                dse__st_close(set);
                return r;
        }
        *ret_set = set;
        return 0;
}

int dse__st_set_from_source(const char *path, struct dse__st_tensor *tensors, size_t n,
                            const struct dse__st_source *source, void *ctx, struct dse__st_set **ret_set,
                            struct dse_diag *reterr) {
        struct dse__st_set *set = calloc(1, sizeof *set);
        struct st_file *f = calloc(1, sizeof *f);
        char *p = strdup(path);
        if (!set || !f || !p) {
                free(set);
                free(f);
                free(p);
                free(tensors);
                source->close(ctx);
                return -ENOMEM;
        }
        f->path = p;
        f->fd = -1;
        set->files = f;
        set->n_files = 1;
        set->tensors = tensors;
        set->n = n;
        set->source = source;
        set->source_ctx = ctx;
        qsort(set->tensors, set->n, sizeof *set->tensors, cmp_name);
        for (size_t i = 1; i < set->n; i++)
                if (strcmp(set->tensors[i].name, set->tensors[i - 1].name) == 0) {
                        int r = dse__fail(reterr, -EBADMSG, "%s: tensor '%s' is given twice", path, set->tensors[i].name);
                        dse__st_close(set);
                        return r;
                }
        *ret_set = set;
        return 0;
}

int dse__st_ggml_type(const struct dse__st_set *set, const struct dse__st_tensor *t) {
        return set->source ? (int)set->source->ggml_type(set->source_ctx, t) : -1;
}

int dse__st_read_blocks(const struct dse__st_set *set, const struct dse__st_tensor *t, int64_t row0, int64_t n_rows,
                        void *buf, struct dse_diag *reterr) {
        if (!set->source)
                return -EINVAL;
        return set->source->read_blocks(set->source_ctx, t, row0, n_rows, buf, reterr);
}

size_t dse__st_n_tensors(const struct dse__st_set *set) {
        return set->n;
}

const struct dse__st_tensor *dse__st_tensor_at(const struct dse__st_set *set, size_t i) {
        return i < set->n ? &set->tensors[i] : NULL;
}

const struct dse__st_tensor *dse__st_find(const struct dse__st_set *set, const char *name) {
        struct dse__st_tensor key;
        if (!name || strlen(name) >= sizeof key.name)
                return NULL;
        snprintf(key.name, sizeof key.name, "%s", name);
        return bsearch(&key, set->tensors, set->n, sizeof key, cmp_name);
}

const char *dse__st_file_path(const struct dse__st_set *set, int file) {
        return file >= 0 && file < set->n_files ? set->files[file].path : "?";
}

int dse__st_read(const struct dse__st_set *set, const struct dse__st_tensor *t, uint64_t off, void *buf, size_t n,
                 struct dse_diag *reterr) {
        if (off > t->end - t->begin || n > t->end - t->begin - off)
                return -EINVAL;
        if (set->source)
                return set->source->read(set->source_ctx, t, off, buf, n, reterr);
        const struct st_file *f = &set->files[t->file];
        int r = read_full(f->fd, buf, n, f->data_start + t->begin + off);
        if (r == -EBADMSG)
                return dse__fail(reterr, r, "%s: tensor '%s': file truncated", f->path, t->name);
        if (r < 0)
                return dse__fail(reterr, r, "%s: tensor '%s': read failed: %s", f->path, t->name, strerror(-r));
        return 0;
}
