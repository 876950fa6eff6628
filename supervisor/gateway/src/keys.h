/* keys.h — API keys, the server room's auth (keys.c). Shared with the unit tests. */
#ifndef DSV_GATEWAY_KEYS_H
#define DSV_GATEWAY_KEYS_H

#include <stddef.h>

struct dsv_gw_keys {
        size_t n;
        char **keys;
};

/* Reads keys, one per line; blank lines and lines starting with '#' are skipped, spaces
 * around a key trimmed. -EINVAL when the file holds no key. */
int dsv__gw_keys_load(const char *path, struct dsv_gw_keys *ret);
/* Adds a copy of key (1..512 bytes): -EINVAL for an empty or longer one. */
int dsv__gw_keys_add(struct dsv_gw_keys *k, const char *key);
void dsv__gw_keys_done(struct dsv_gw_keys *k);
/* 1 when the "Authorization" header value is "Bearer <one of the keys>", else 0. The time
 * taken depends on the keys' lengths only, not on where a guess differs. */
int dsv__gw_keys_check(const struct dsv_gw_keys *k, const char *authorization);

#endif
