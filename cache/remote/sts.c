/* Web identity (cache/remote/s3.h): the credentials of a role, from STS's
 * AssumeRoleWithWebIdentity and an OIDC token in a file. This is how pods on
 * Kubernetes (EKS's IRSA, and any OIDC provider a cluster trusts) get AWS
 * credentials: the token file is mounted and rotated by the cluster,
 * AWS_ROLE_ARN names the role, and the call is not signed.
 *
 * The token is a secret like the keys: it is read, sent and wiped, and never
 * named in a message, a log line or --json; STS's answers are reduced to
 * their error code. Bounded by the remote's timeouts and retries. */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* free */
#include <string.h> /* memcpy, memmem, strlen */
#include <time.h>   /* nanosleep */

#include "cache/remote/s3.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/logging.h"

#define TOKEN_MAX (64 * 1024)  /* an OIDC token is a few KiB */
#define ANSWER_MAX (64 * 1024) /* STS's answer is about 2 KiB */

static void wipe(void *p, size_t n) {
  volatile char *v = p;
  for (size_t i = 0; i < n; i++)
    v[i] = 0;
}

/* The text of the first <tag>...</tag> in body: printable ASCII with no
 * space, '<' or '&' (keys, tokens and dates are), shorter than cap. */
static int xml_value(const char *body, size_t len, const char *tag, char *out, size_t cap) {
  char open[48];
  const char *a, *b, *end = body + len;
  size_t n = (size_t)snprintf(open, sizeof open, "<%s>", tag);
  out[0] = '\0';
  a = memmem(body, len, open, n);
  if (!a) return 0;
  a += n;
  for (b = a; b < end && *b != '<'; b++)
    if ((unsigned char)*b <= 0x20 || (unsigned char)*b >= 0x7f || *b == '&') return 0;
  if (b >= end || (size_t)(b - a) >= cap || b == a) return 0;
  if ((size_t)(end - b) < n + 1 || b[1] != '/' || memcmp(b + 2, tag, n - 2) || b[n] != '>')
    return 0;
  memcpy(out, a, (size_t)(b - a));
  out[b - a] = '\0';
  return 1;
}

kiln_status kiln_sts_parse(const char *body, size_t len, kiln_s3_creds *c) {
  const char *cred = memmem(body, len, "<Credentials>", 13);
  size_t left = cred ? len - (size_t)(cred - body) : 0;
  if (!cred || !xml_value(cred, left, "AccessKeyId", c->access_key, sizeof c->access_key) ||
      !xml_value(cred, left, "SecretAccessKey", c->secret_key, sizeof c->secret_key) ||
      !xml_value(cred, left, "SessionToken", c->session_token, sizeof c->session_token)) {
    wipe(c->access_key, sizeof c->access_key);
    wipe(c->secret_key, sizeof c->secret_key);
    wipe(c->session_token, sizeof c->session_token);
    return kiln_fail(KILN_EREMOTE,
                     "STS's answer has no usable Credentials (AccessKeyId, SecretAccessKey, "
                     "SessionToken)");
  }
  if (!xml_value(cred, left, "Expiration", c->expiration, sizeof c->expiration))
    c->expiration[0] = '\0';
  return KILN_OK;
}

typedef struct answer {
  char *buf;
  size_t len, cap;
  int over;
} answer;

static size_t on_body(char *p, size_t size, size_t n, void *user) {
  answer *a = user;
  size_t k = size * n;
  if (a->len + k >= a->cap) {
    a->over = 1;
    return 0;
  }
  memcpy(a->buf + a->len, p, k);
  a->len += k;
  a->buf[a->len] = '\0';
  return k;
}

/* The form body: Action, Version, RoleArn, RoleSessionName, WebIdentityToken,
 * each percent-encoded. */
static kiln_status make_form(CURL *e, const kiln_s3_creds *c, const char *token, char **out) {
  char *arn = curl_easy_escape(e, c->role_arn, 0), *name = curl_easy_escape(e, c->session_name, 0);
  char *tok = curl_easy_escape(e, token, 0);
  size_t n;
  kiln_status rc = KILN_OK;
  *out = NULL;
  if (!arn || !name || !tok) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  n = strlen(arn) + strlen(name) + strlen(tok) + 160;
  if (!(*out = malloc(n))) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  snprintf(*out, n,
           "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=%s&RoleSessionName=%s&"
           "WebIdentityToken=%s",
           arn, name, tok);
out:
  if (tok) wipe(tok, strlen(tok));
  curl_free(arn);
  curl_free(name);
  curl_free(tok);
  return rc;
}

/* What STS's error code means for the user. */
static const char *hint(const char *code) {
  if (strcmp(code, "InvalidIdentityToken") == 0)
    return "the token in the file is not one STS accepts (its issuer is not an identity "
           "provider of the account, or it is malformed)";
  if (strcmp(code, "ExpiredTokenException") == 0)
    return "the token in the file has expired (the cluster renews it: is the file the one it "
           "writes?)";
  if (strcmp(code, "AccessDenied") == 0 || strcmp(code, "AccessDeniedException") == 0)
    return "the role's trust policy does not allow this token, or AWS_ROLE_ARN is wrong";
  if (strcmp(code, "IDPCommunicationError") == 0)
    return "STS could not reach the identity provider";
  return "STS refused it";
}

/* One attempt: 1 = done (rc set), 0 = worth another try (detail set). */
static int attempt(CURL *e, const char *url, const char *form, const kiln_remote_config *cfg,
                   kiln_s3_creds *c, const char *endpoint, kiln_status *rc, char *detail,
                   size_t cap) {
  answer a = {NULL, 0, ANSWER_MAX, 0};
  char code[64] = "";
  long status = 0;
  CURLcode cc;
  int done = 1;
  if (!(a.buf = malloc(a.cap))) {
    *rc = kiln_fail(KILN_ENOMEM, "out of memory");
    return 1;
  }
  a.buf[0] = '\0';
  curl_easy_reset(e);
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, form);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, cfg->connect_timeout_ms);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, cfg->timeout_ms);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &a);
  if (cfg->ca_file[0]) curl_easy_setopt(e, CURLOPT_CAINFO, cfg->ca_file);
  cc = curl_easy_perform(e);
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  if (cc != CURLE_OK && !a.over) {
    snprintf(detail, cap, "%s", curl_easy_strerror(cc));
    done = 0;
  } else if (a.over) {
    *rc =
        kiln_fail(KILN_EREMOTE, "STS at %.300s answered more than %d bytes", endpoint, ANSWER_MAX);
  } else if (status == 200) {
    *rc = kiln_sts_parse(a.buf, a.len, c);
  } else {
    kiln_s3_error_code(a.buf, a.len, code, sizeof code); /* STS's error document, as S3's */
    snprintf(detail, cap, "HTTP %ld%s%s", status, code[0] ? " " : "", code);
    if (status >= 500 || status == 429 || strcmp(code, "IDPCommunicationError") == 0)
      done = 0;
    else
      *rc = kiln_fail(status == 403 || status == 400 ? KILN_EPERM : KILN_EREMOTE,
                      "web identity: STS at %.300s refused AssumeRoleWithWebIdentity for role "
                      "%.200s: %s: %s",
                      endpoint, c->role_arn, detail, hint(code));
  }
  wipe(a.buf, a.len);
  free(a.buf);
  return done;
}

kiln_status kiln_sts_web_identity(kiln_s3_creds *c, const char *endpoint,
                                  const kiln_remote_config *cfg) {
  uint8_t *token = NULL;
  size_t len = 0;
  char *form = NULL, url[1100], detail[200] = "";
  CURL *e = NULL;
  kiln_status rc = KILN_OK;
  if (!c->web_identity) return kiln_fail(KILN_EINVAL, "kiln_sts_web_identity: no web identity");
  rc = kiln_read_regular(c->token_file, UINT64_MAX, TOKEN_MAX, 0, &token, &len);
  if (rc != KILN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    return kiln_fail(rc == KILN_ENOTFOUND ? KILN_ENOTFOUND : KILN_EIO,
                     "web identity: the token file %.500s cannot be read: %s", c->token_file, why);
  }
  while (len && (token[len - 1] == '\n' || token[len - 1] == '\r' || token[len - 1] == ' '))
    token[--len] = '\0';
  if (len == 0 || memchr(token, '\0', len)) {
    rc = kiln_fail(KILN_EINVAL, "web identity: the token file %.500s is %s", c->token_file,
                   len ? "not text" : "empty");
    goto out;
  }
  snprintf(url, sizeof url, "%s/", endpoint);
  if (!(e = curl_easy_init())) {
    rc = kiln_fail(KILN_ENOMEM, "curl_easy_init failed");
    goto out;
  }
  KILN_CHECK(make_form(e, c, (const char *)token, &form));
  for (int i = 0;; i++) {
    if (attempt(e, url, form, cfg, c, endpoint, &rc, detail, sizeof detail)) break;
    if (i >= cfg->retries) {
      rc = kiln_fail(KILN_EREMOTE,
                     "web identity: STS at %.300s (AssumeRoleWithWebIdentity for role %.200s) "
                     "failed: %s (%d attempts)",
                     endpoint, c->role_arn, detail, i + 1);
      break;
    }
    {
      struct timespec ts = {0, (long)(i < 3 ? 200 << i : 1000) * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  if (rc == KILN_OK)
    kiln_log(KILN_LOG_DEBUG, "web identity: role %s, session %s, credentials until %s", c->role_arn,
             c->session_name, c->expiration[0] ? c->expiration : "(not said)");
out:
  if (form) wipe(form, strlen(form));
  free(form);
  if (token) wipe(token, len);
  free(token);
  if (e) curl_easy_cleanup(e);
  return rc;
}
