/* tls.h — HTTPS material for libmicrohttpd (tls.c), the server room's: the certificate
 * chain and private key, read as PEM into memory when the gateway is created. */
#ifndef DSV_GATEWAY_TLS_H
#define DSV_GATEWAY_TLS_H

struct gw_tls {
        char *cert_pem; /* NULL: plain HTTP */
        char *key_pem;  /* wiped before it is freed */
};

/* Reads both files (each at most 1 MiB). -ENOENT/-EACCES for an unreadable file, -EINVAL
 * when one is given without the other, the certificate has no "CERTIFICATE" PEM block or
 * the key no "PRIVATE KEY" block, -EOPNOTSUPP when libmicrohttpd was built without TLS.
 * Whether the two match is seen when the daemon starts. Both NULL: *ret zeroed, 0. */
int dsv__gw_tls_load(const char *cert_path, const char *key_path, struct gw_tls *ret);
void dsv__gw_tls_done(struct gw_tls *t);

#endif
