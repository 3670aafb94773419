/* Fuzz target: the remote cache's record document (cache/remote/record.c).
 * The input is a document as a server would send it; it is decoded with and
 * without an HMAC key. Whatever decodes must encode and decode again to the
 * same record (signed with the fuzzer's key), or the target aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/remote/remote.h"

#define WANT_KEY "799e6e1640d1f7398827039588efbdb068616be1db5e3f1757a60e1dc7df8f40"

static const uint8_t key[] = "kiln-fuzz-key";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_record a, b;
  char *doc = NULL;
  size_t len = 0;
  const char *want = size && (data[0] & 1) ? NULL : WANT_KEY;
  if (kiln_remote_record_decode((const char *)data, size, want, key, sizeof key - 1, &a) ==
          KILN_OK &&
      kiln_remote_record_decode((const char *)data, size, want, NULL, 0, &b) != KILN_OK)
    abort(); /* a signed record that passes must pass without a key too */
  if (kiln_remote_record_decode((const char *)data, size, want, NULL, 0, &a) != KILN_OK) return 0;
  if (kiln_remote_record_encode(&a, key, sizeof key - 1, &doc, &len) != KILN_OK) abort();
  if (kiln_remote_record_decode(doc, len, a.key, key, sizeof key - 1, &b) != KILN_OK) abort();
  if (memcmp(&a, &b, sizeof a) != 0) abort();
  free(doc);
  return 0;
}
