/* SHA-256 and HMAC-SHA256 on OpenSSL's EVP interface. */
#include "common/digest.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>

#include "common/error.h"

struct kiln_sha256 {
  EVP_MD_CTX *ctx;
};

kiln_status kiln_sha256_new(kiln_sha256 **out) {
  kiln_sha256 *h = calloc(1, sizeof *h);
  if (!h) return kiln_fail(KILN_ENOMEM, "sha256: out of memory");
  h->ctx = EVP_MD_CTX_new();
  if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
    kiln_sha256_free(h);
    return kiln_fail(KILN_EINTERNAL, "sha256: EVP_DigestInit_ex failed");
  }
  *out = h;
  return KILN_OK;
}

kiln_status kiln_sha256_update(kiln_sha256 *h, const void *data, size_t len) {
  if (len && EVP_DigestUpdate(h->ctx, data, len) != 1)
    return kiln_fail(KILN_EINTERNAL, "sha256: EVP_DigestUpdate failed");
  return KILN_OK;
}

static void to_hex(char *out, const unsigned char *md, unsigned n) {
  static const char hex[] = "0123456789abcdef";
  for (unsigned i = 0; i < n; i++) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  out[2 * n] = '\0';
}

kiln_status kiln_sha256_final_hex(kiln_sha256 *h, char out[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (EVP_DigestFinal_ex(h->ctx, md, &n) != 1 || n != 32)
    return kiln_fail(KILN_EINTERNAL, "sha256: EVP_DigestFinal_ex failed");
  to_hex(out, md, n);
  return KILN_OK;
}

void kiln_sha256_free(kiln_sha256 *h) {
  if (!h) return;
  EVP_MD_CTX_free(h->ctx);
  free(h);
}

kiln_status kiln_sha256_hex(char out[65], const void *data, size_t len) {
  kiln_sha256 *h = NULL;
  kiln_status rc;
  KILN_CHECK(kiln_sha256_new(&h));
  KILN_CHECK(kiln_sha256_update(h, data, len));
  KILN_CHECK(kiln_sha256_final_hex(h, out));
out:
  kiln_sha256_free(h);
  return rc;
}

kiln_status kiln_hmac_sha256_hex(char out[65], const void *key, size_t key_len, const void *data,
                                 size_t len) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (!HMAC(EVP_sha256(), key, (int)key_len, data, len, md, &n) || n != 32)
    return kiln_fail(KILN_EINTERNAL, "hmac-sha256 failed");
  to_hex(out, md, n);
  return KILN_OK;
}

int kiln_is_hex64(const char *s) {
  int i;
  for (i = 0; i < 64; i++) {
    char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return 0;
  }
  return s[64] == '\0';
}
