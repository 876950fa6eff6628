/* The pages under a KV cache (engine/src/kv_pages.c): asked for 2 MiB pages, the memory
 * is 2 MiB aligned, zero and writable end to end; a host whose transparent huge pages
 * are off ("[never]") or absent (no sysfs file), and DSV_KV_PAGES=small, get 4 KiB pages
 * that work the same; a bad DSV_KV_PAGES is refused by name; a session's private cache
 * and the paged pool give the same logits, bitwise, in either page size. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dse.h"
#include "kv_pages.h"
#include "t.h"

#include "fixture-models.h"

#define HUGE_PAGE ((size_t)2 << 20)
#define N 24  /* prompt tokens */
#define BT 16 /* block size */

/* A THP "enabled" file saying text, in a temporary file; path receives its name. */
static void thp_file(char *path, size_t len, const char *text) {
        snprintf(path, len, "%s/thp-enabled.XXXXXX", getenv("DSV_BUILD_DIR") ? getenv("DSV_BUILD_DIR") : "/tmp");
        int fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
}

/* Zero throughout, and every byte keeps what is written to it. */
static void check_memory(const struct dse__kv_pages *p) {
        const uint8_t *b = p->base;
        for (size_t i = 0; i < p->bytes; i += 4093)
                ASSERT_EQ(b[i], 0);
        ASSERT_EQ(b[p->bytes - 1], 0);
        memset(p->base, 0xa5, p->bytes);
        ASSERT_EQ(b[0], 0xa5);
        ASSERT_EQ(b[p->bytes - 1], 0xa5);
}

/* Maps bytes asking for want with THP's mode file saying thp_text; the kind it got must
 * be expect. */
static void map_with(const char *thp_text, enum dse_kv_pages want, size_t bytes, enum dse_kv_pages expect) {
        char path[1024];
        thp_file(path, sizeof path, thp_text);
        struct dse__kv_pages p;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse__kv_pages_map(bytes, want, path, &p, &diag));
        unlink(path);
        ASSERT_EQ(p.bytes, bytes);
        if (p.kind == DSE_KV_PAGES_HUGE)
                ASSERT_EQ((uintptr_t)p.base % HUGE_PAGE, 0);
        ASSERT_EQ(p.kind, expect);
        check_memory(&p);
        dse__kv_pages_unmap(&p);
        ASSERT_TRUE(p.map == NULL && p.base == NULL);
}

/* The host's kernel has transparent huge pages at all (MADV_HUGEPAGE is then accepted). */
static int host_has_thp(void) {
        return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
}

TEST(huge_when_thp_is_madvise_or_always) {
        size_t odd = 3 * HUGE_PAGE + 12345; /* not a whole number of pages */
        enum dse_kv_pages want = host_has_thp() ? DSE_KV_PAGES_HUGE : DSE_KV_PAGES_SMALL;
        map_with("always [madvise] never\n", DSE_KV_PAGES_HUGE, odd, want);
        map_with("[always] madvise never\n", DSE_KV_PAGES_HUGE, HUGE_PAGE, want);
        map_with("always [madvise] never\n", DSE_KV_PAGES_HUGE, 100, want);
}

TEST(small_when_thp_is_never_absent_or_not_asked) {
        map_with("always madvise [never]\n", DSE_KV_PAGES_HUGE, 5 * HUGE_PAGE + 7, DSE_KV_PAGES_SMALL);
        map_with("", DSE_KV_PAGES_HUGE, 4096, DSE_KV_PAGES_SMALL);
        map_with("always [madvise] never\n", DSE_KV_PAGES_SMALL, 3 * HUGE_PAGE, DSE_KV_PAGES_SMALL);
        struct dse__kv_pages p;
        ASSERT_OK(dse__kv_pages_map(65536, DSE_KV_PAGES_HUGE, "/nonexistent/transparent_hugepage/enabled", &p, NULL));
        ASSERT_EQ(p.kind, DSE_KV_PAGES_SMALL);
        check_memory(&p);
        dse__kv_pages_unmap(&p);
}

TEST(bad_arguments_and_environment) {
        struct dse__kv_pages p;
        struct dse_diag diag = {{0}};
        ASSERT_ERR(dse__kv_pages_map(0, DSE_KV_PAGES_HUGE, NULL, &p, &diag), -EINVAL);
        ASSERT_ERR(dse__kv_pages_map(4096, DSE_KV_PAGES_COUNT, NULL, &p, &diag), -EINVAL);
        ASSERT_ERR(dse__kv_pages_map(SIZE_MAX - 4096, DSE_KV_PAGES_HUGE, "/nonexistent", &p, &diag), -ENOMEM);
        ASSERT_TRUE(strstr(diag.msg, "MiB") != NULL);
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        setenv("DSV_KV_PAGES", "2m", 1);
        struct dse_kv_cache *kv = NULL;
        struct dse_session *s = NULL;
        ASSERT_ERR(dse_kv_cache_new(m, (size_t)1 << 20, BT, 1, 64, &kv, &diag), -EINVAL);
        ASSERT_TRUE(strstr(diag.msg, "DSV_KV_PAGES='2m'") != NULL && strstr(diag.msg, "huge or small") != NULL);
        ASSERT_ERR(dse_session_new(m, 64, NULL, &s, &diag), -EINVAL);
        ASSERT_TRUE(strstr(diag.msg, "DSV_KV_PAGES") != NULL);
        unsetenv("DSV_KV_PAGES");
        ASSERT_STREQ(dse_kv_pages_to_string(DSE_KV_PAGES_HUGE), "huge");
        ASSERT_STREQ(dse_kv_pages_to_string(DSE_KV_PAGES_SMALL), "small");
        dse_model_free(m);
}

/* Logits of the prompt on a session's private cache and, a token at a time, on the paged
 * pool, with the pages DSV_KV_PAGES names. */
static void logits_with_pages(struct dse_model *m, const char *pages, const int32_t *ids, float *session_out,
                              float *paged_out) {
        int V = dse_model_vocab_size(m);
        setenv("DSV_KV_PAGES", pages, 1);
        enum dse_kv_pages want = strcmp(pages, "small") == 0 || !host_has_thp() ? DSE_KV_PAGES_SMALL : DSE_KV_PAGES_HUGE;
        struct dse_diag diag = {{0}};
        struct dse_session *s = NULL;
        ASSERT_OK(dse_session_new(m, N, NULL, &s, &diag));
        ASSERT_EQ(dse_session_kv_pages(s), want);
        ASSERT_OK(dse_session_eval(s, ids, N, session_out, NULL, &diag));
        dse_session_free(s);
        struct dse_kv_cache *kv = NULL;
        struct dse_batch *b = NULL;
        ASSERT_OK(dse_kv_cache_new(m, (size_t)8 << 20, BT, 2, 64, &kv, &diag));
        ASSERT_EQ(dse_kv_cache_pages(kv), want);
        ASSERT_OK(dse_batch_new(m, kv, NULL, &b, &diag));
        int seq = dse_kv_seq_open(kv);
        ASSERT_TRUE(seq >= 0);
        for (int i = 0; i < N; i++) {
                struct dse_batch_seq bs = {seq, ids + i, 1, paged_out + (size_t)i * V};
                ASSERT_OK(dse_batch_step(b, &bs, 1, &diag));
        }
        dse_batch_free(b);
        dse_kv_cache_free(kv);
        unsetenv("DSV_KV_PAGES");
}

static void same_logits_in_either_page_size(const char *fixture) {
        struct dse_model *m = fixture_model_open(fixture);
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m);
        int32_t ids[N];
        for (int i = 0; i < N; i++)
                ids[i] = (int32_t)((i * 97 + 5) % V);
        size_t n = (size_t)N * V;
        float *out = malloc(4 * n * sizeof(float));
        ASSERT_TRUE(out);
        logits_with_pages(m, "huge", ids, out, out + n);
        logits_with_pages(m, "small", ids, out + 2 * n, out + 3 * n);
        ASSERT_TRUE(memcmp(out, out + 2 * n, n * sizeof(float)) == 0);
        ASSERT_TRUE(memcmp(out + n, out + 3 * n, n * sizeof(float)) == 0);
        free(out);
        dse_model_free(m);
}

TEST(same_logits_in_either_page_size_gqa) {
        same_logits_in_either_page_size("llama3-rope-gqa");
}

TEST(same_logits_in_either_page_size_mla) {
        same_logits_in_either_page_size("deepseek-v2-mla-qlora-yarn");
}
