/* Internal: SHA-256 (OpenSSL libcrypto) with incremental updates, hex output. */
#ifndef KILN_COMMON_DIGEST_H
#define KILN_COMMON_DIGEST_H

#include <stddef.h>

#include "kiln/status.h"

typedef struct kiln_sha256 kiln_sha256;

kiln_status kiln_sha256_new(kiln_sha256 **out);
kiln_status kiln_sha256_update(kiln_sha256 *h, const void *data, size_t len);
/* Writes 64 lowercase hex digits and a NUL; h stays usable only for _free. */
kiln_status kiln_sha256_final_hex(kiln_sha256 *h, char out[65]);
void kiln_sha256_free(kiln_sha256 *h);

/* One-shot SHA-256 of a buffer, as hex. */
kiln_status kiln_sha256_hex(char out[65], const void *data, size_t len);
/* HMAC-SHA256 of data with key, as hex. */
kiln_status kiln_hmac_sha256_hex(char out[65], const void *key, size_t key_len, const void *data,
                                 size_t len);
/* 1 if s is exactly 64 lowercase hex digits. */
int kiln_is_hex64(const char *s);

#endif
