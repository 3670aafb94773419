/* cache/remote/s3.c and s3_config.c: AWS Signature V4 as libcurl makes it
 * for kiln's requests (AWS's published vectors, and an independent signer
 * written here for the requests kiln sends), read back from a loopback
 * listener of the test's own; the URL, bucket and prefix rules; where the
 * credentials, region and endpoint come from; S3's answers explained; the
 * backend end to end against the listener; no secret in any log line at
 * debug or in any error. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "cache/remote/s3.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/params.h"
#include "kiln/log.h"
#include "tests/unit/test_util.h"

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* ---- a loopback listener: records each request, answers a canned one ---- */

typedef struct listener {
  int fd, port;
  pthread_t thread;
  pthread_mutex_t mu;
  int stop;
  /* the answer to every request (a HEAD gets its head only) */
  int status;
  char extra_headers[512];
  char body[2048];
  /* what came */
  char last[16384]; /* the last request: head and body */
  size_t last_len;
  int count;
  /* a request with this x-amz-security-token gets 400 ExpiredToken ("" none) */
  char expired_token[64];
  int expired; /* how many did */
} listener;

static void read_request(int c, char *buf, size_t cap, size_t *len) {
  size_t n = 0, want = 0;
  char *end = NULL;
  while (n < cap - 1) {
    ssize_t r = recv(c, buf + n, cap - 1 - n, 0);
    if (r <= 0) break;
    n += (size_t)r;
    buf[n] = '\0';
    if (!end && (end = strstr(buf, "\r\n\r\n"))) {
      const char *cl = strcasestr(buf, "\r\ncontent-length:");
      want = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0);
    }
    if (end && n >= want) break;
  }
  buf[n] = '\0';
  *len = n;
}

static void req_header(const listener *L, const char *name, char *out, size_t cap);

#define S3_ERR(code)                                                                               \
  "<?xml version=\"1.0\"?><Error><Code>" code "</Code><Message>m</Message></Error>"

static void *listen_main(void *arg) {
  listener *L = arg;
  for (;;) {
    char req[16384], resp[4096];
    size_t len = 0;
    int c = accept(L->fd, NULL, NULL), n, head;
    if (c < 0) break;
    pthread_mutex_lock(&L->mu);
    if (L->stop) {
      pthread_mutex_unlock(&L->mu);
      close(c);
      break;
    }
    pthread_mutex_unlock(&L->mu);
    read_request(c, req, sizeof req, &len);
    head = strncmp(req, "HEAD ", 5) == 0;
    pthread_mutex_lock(&L->mu);
    memcpy(L->last, req, len + 1);
    L->last_len = len;
    L->count++;
    {
      char tok[128];
      req_header(L, "x-amz-security-token", tok, sizeof tok);
      if (L->expired_token[0] && strcmp(tok, L->expired_token) == 0) {
        const char *b = S3_ERR("ExpiredToken");
        L->expired++;
        n = snprintf(resp, sizeof resp,
                     "HTTP/1.1 400 X\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     strlen(b), head ? "" : b);
      } else {
        n = snprintf(resp, sizeof resp,
                     "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n%s",
                     L->status, strlen(L->body), L->extra_headers, head ? "" : L->body);
      }
    }
    pthread_mutex_unlock(&L->mu);
    if (send(c, resp, (size_t)n, MSG_NOSIGNAL) < 0) { /* the client may have gone */
    }
    shutdown(c, SHUT_WR);
    close(c);
  }
  return NULL;
}

static void listener_start(listener *L) {
  struct sockaddr_in a;
  socklen_t al = sizeof a;
  memset(L, 0, sizeof *L);
  pthread_mutex_init(&L->mu, NULL);
  L->status = 200;
  L->fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(L->fd >= 0);
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(L->fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(L->fd, 64), 0);
  assert_int_equal(getsockname(L->fd, (struct sockaddr *)&a, &al), 0);
  L->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&L->thread, NULL, listen_main, L), 0);
}

static void listener_stop(listener *L) {
  int c;
  struct sockaddr_in a;
  pthread_mutex_lock(&L->mu);
  L->stop = 1;
  pthread_mutex_unlock(&L->mu);
  /* wake accept() */
  c = socket(AF_INET, SOCK_STREAM, 0);
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)L->port);
  if (connect(c, (struct sockaddr *)&a, sizeof a) != 0) { /* accept may have failed already */
  }
  close(c);
  pthread_join(L->thread, NULL);
  close(L->fd);
  pthread_mutex_destroy(&L->mu);
}

static void answer(listener *L, int status, const char *extra, const char *body) {
  pthread_mutex_lock(&L->mu);
  L->status = status;
  snprintf(L->extra_headers, sizeof L->extra_headers, "%s", extra ? extra : "");
  snprintf(L->body, sizeof L->body, "%s", body ? body : "");
  pthread_mutex_unlock(&L->mu);
}

/* The value of the first header name in the recorded request ("" none). */
static void req_header(const listener *L, const char *name, char *out, size_t cap) {
  const char *p = L->last;
  size_t n = strlen(name);
  out[0] = '\0';
  while ((p = strstr(p, "\r\n")) && p[2] != '\r') {
    p += 2;
    if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
      const char *v = p + n + 1, *e;
      while (*v == ' ')
        v++;
      e = strstr(v, "\r\n");
      snprintf(out, cap, "%.*s", (int)(e - v), v);
      return;
    }
  }
}

static int header_count(const listener *L, const char *name) {
  char pat[128];
  int n = 0;
  snprintf(pat, sizeof pat, "\r\n%s:", name);
  for (const char *p = L->last; (p = strcasestr(p, pat)); p++)
    n++;
  return n;
}

/* ---- an independent SigV4 signer (AWS's documentation, step by step) ---- */

static void hmac(unsigned char out[32], const void *key, size_t klen, const char *msg) {
  unsigned int n = 32;
  HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), out, &n);
}

static void hex(char *out, const unsigned char *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* The signature of the recorded request, made from its own method, path,
 * headers (those named by signed, "host;x-amz-date"), the payload hash, the
 * date, the scope and the secret. *creq_hash gets the canonical request's
 * SHA-256. */
static void reference_signature(const listener *L, const char *signed_hdrs, const char *payload,
                                const char *secret, const char *region, const char *service,
                                char sig[65], char creq_hash[65]) {
  char creq[8192], method[16], path[1024], sts[1024], date[32], name[64], val[1024], k[160];
  const char *s = signed_hdrs;
  unsigned char k1[32], k2[32], k3[32], k4[32], out[32];
  size_t n;
  assert_int_equal(sscanf(L->last, "%15s %1023s", method, path), 2);
  n = (size_t)snprintf(creq, sizeof creq, "%s\n%s\n\n", method, path);
  while (*s) {
    size_t len = strcspn(s, ";");
    snprintf(name, sizeof name, "%.*s", (int)len, s);
    req_header(L, name, val, sizeof val);
    n += (size_t)snprintf(creq + n, sizeof creq - n, "%s:%s\n", name, val);
    s += len + (s[len] == ';');
  }
  snprintf(creq + n, sizeof creq - n, "\n%s\n%s", signed_hdrs, payload);
  assert_int_equal(kiln_sha256_hex(creq_hash, creq, strlen(creq)), KILN_OK);
  req_header(L, "x-amz-date", date, sizeof date);
  snprintf(sts, sizeof sts, "AWS4-HMAC-SHA256\n%s\n%.8s/%s/%s/aws4_request\n%s", date, date, region,
           service, creq_hash);
  snprintf(k, sizeof k, "AWS4%s", secret);
  snprintf(name, sizeof name, "%.8s", date);
  hmac(k1, k, strlen(k), name);
  hmac(k2, k1, 32, region);
  hmac(k3, k2, 32, service);
  hmac(k4, k3, 32, "aws4_request");
  hmac(out, k4, 32, sts);
  hex(sig, out, 32);
}

/* ---- environment helpers ---- */

static const char *const env_names[] = {"AWS_ACCESS_KEY_ID",
                                        "AWS_SECRET_ACCESS_KEY",
                                        "AWS_SESSION_TOKEN",
                                        "AWS_PROFILE",
                                        "AWS_SHARED_CREDENTIALS_FILE",
                                        "AWS_CONFIG_FILE",
                                        "AWS_REGION",
                                        "AWS_DEFAULT_REGION",
                                        "AWS_ENDPOINT_URL_S3",
                                        "AWS_ENDPOINT_URL",
                                        "KILN_S3_ENDPOINT",
                                        "KILN_S3_ADDRESSING",
                                        "AWS_ENDPOINT_URL_STS",
                                        "AWS_WEB_IDENTITY_TOKEN_FILE",
                                        "AWS_ROLE_ARN",
                                        "AWS_ROLE_SESSION_NAME"};

typedef struct fixture {
  char dir[256];
  char home[300];
  char old_home[1024];
  listener L;
  int listening;
} fixture;

static void clean_env(void) {
  for (size_t i = 0; i < sizeof env_names / sizeof *env_names; i++)
    unsetenv(env_names[i]);
  kiln_params_reset();
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  const char *h = getenv("HOME");
  test_make_tmpdir(f->dir, sizeof f->dir);
  snprintf(f->home, sizeof f->home, "%s/home", f->dir);
  mkdir(f->home, 0700);
  snprintf(f->old_home, sizeof f->old_home, "%s", h ? h : "");
  setenv("HOME", f->home, 1);
  clean_env();
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  if (f->listening) listener_stop(&f->L);
  clean_env();
  setenv("HOME", f->old_home, 1);
  test_rm_rf(f->dir);
  free(f);
  return 0;
}

static void write_file(const char *path, const char *text) {
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs(text, fp);
  fclose(fp);
}

static void aws_file(fixture *f, const char *name, const char *text) {
  char p[400];
  snprintf(p, sizeof p, "%s/.aws", f->home);
  mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/.aws/%s", f->home, name);
  write_file(p, text);
}

static void env(const char *name, const char *value) {
  setenv(name, value, 1);
  kiln_params_reset();
}

static void new_s3(kiln_s3 **out, const char *url) {
  kiln_remote_config cfg;
  memset(&cfg, 0, sizeof cfg);
  snprintf(cfg.base, sizeof cfg.base, "%s", url);
  cfg.connect_timeout_ms = 2000;
  cfg.timeout_ms = 5000;
  cfg.retries = 1;
  cfg.backoff_ms = 1;
  cfg.parallel = 4;
  cfg.breaker_threshold = 100;
  assert_int_equal(kiln_s3_new(out, &cfg), KILN_OK);
}

/* One request through libcurl as http.c makes it (the base URL, then the
 * S3 hook), with extra headers (a fixed x-amz-date: tests only), to host
 * (CURLOPT_CONNECT_TO: the listener). */
static void send_prepared(kiln_s3 *s, listener *L, kiln_remote_req *r, const char *const *extra,
                          int n_extra) {
  CURL *e = curl_easy_init();
  struct curl_slist *h = NULL, *to = NULL;
  FILE *body = NULL;
  char url[2300], connect_to[300], host[256];
  const char *base = kiln_s3_config_of(s)->base, *a = strstr(base, "://") + 3;
  snprintf(host, sizeof host, "%.*s", (int)strcspn(a, "/:"), a);
  snprintf(url, sizeof url, "%s/%s", base, r->path);
  snprintf(connect_to, sizeof connect_to, "%s::127.0.0.1:%d", host, L->port);
  to = curl_slist_append(NULL, connect_to);
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_CONNECT_TO, to);
  if (r->method == KILN_REMOTE_HEAD) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  if (r->method == KILN_REMOTE_DELETE) curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
  if (r->method == KILN_REMOTE_PUT) {
    body = fmemopen((void *)r->body, r->body_len, "rb");
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_READDATA, body);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
  }
  assert_int_equal(kiln_s3_prepare(s, e, r, &h), KILN_OK);
  for (int i = 0; i < n_extra; i++)
    h = curl_slist_append(h, extra[i]);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
  assert_int_equal(curl_easy_perform(e), CURLE_OK);
  if (body) fclose(body);
  curl_slist_free_all(h);
  curl_slist_free_all(to);
  curl_easy_cleanup(e);
}

static void auth_parts(const listener *L, char *signed_hdrs, size_t scap, char sig[65]) {
  char auth[1024];
  const char *p;
  req_header(L, "Authorization", auth, sizeof auth);
  p = strstr(auth, "SignedHeaders=");
  assert_non_null(p);
  snprintf(signed_hdrs, scap, "%.*s", (int)strcspn(p + 14, ","), p + 14);
  p = strstr(auth, "Signature=");
  assert_non_null(p);
  snprintf(sig, 65, "%.64s", p + 10);
}

/* ---- signing ---- */

/* AWS's get-vanilla vector (aws-sig-v4-test-suite), through libcurl itself:
 * the reference signer reproduces its canonical request hash and both give
 * the published signature. */
static void test_sigv4_get_vanilla_vector(void **state) {
  fixture *f = *state;
  CURL *e = curl_easy_init();
  struct curl_slist *h = curl_slist_append(NULL, "X-Amz-Date: 20150830T123600Z"), *to;
  char connect_to[128], auth[1024], sig[65], creq[65];
  listener_start(&f->L);
  f->listening = 1;
  snprintf(connect_to, sizeof connect_to, "example.amazonaws.com:80:127.0.0.1:%d", f->L.port);
  to = curl_slist_append(NULL, connect_to);
  curl_easy_setopt(e, CURLOPT_URL, "http://example.amazonaws.com/");
  curl_easy_setopt(e, CURLOPT_CONNECT_TO, to);
  curl_easy_setopt(e, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:service");
  curl_easy_setopt(e, CURLOPT_USERNAME, "AKIDEXAMPLE");
  curl_easy_setopt(e, CURLOPT_PASSWORD, "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
  assert_int_equal(curl_easy_perform(e), CURLE_OK);
  req_header(&f->L, "Authorization", auth, sizeof auth);
  assert_string_equal(auth,
                      "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
                      "aws4_request, SignedHeaders=host;x-amz-date, "
                      "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  reference_signature(&f->L, "host;x-amz-date", EMPTY_SHA256,
                      "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1", "service", sig,
                      creq);
  assert_string_equal(creq, "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  assert_string_equal(sig, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  curl_slist_free_all(h);
  curl_slist_free_all(to);
  curl_easy_cleanup(e);
}

/* S3's GetObject example (the S3 API reference, "Signature Calculations for
 * the Authorization Header"), as kiln prepares a GET: a virtual-hosted
 * bucket, its x-amz-content-sha256, libcurl's signature. */
static void test_sigv4_s3_get_object_vector(void **state) {
  fixture *f = *state;
  kiln_s3 *s = NULL;
  kiln_remote_req r;
  char auth[1024], sig[65], creq[65];
  const char *extra[] = {"Range: bytes=0-9", "x-amz-date: 20130524T000000Z"};
  listener_start(&f->L);
  f->listening = 1;
  env("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE");
  env("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
  env("AWS_REGION", "us-east-1");
  env("KILN_S3_ENDPOINT", "http://s3.amazonaws.com");
  env("KILN_S3_ADDRESSING", "virtual");
  new_s3(&s, "s3://examplebucket");
  assert_string_equal(kiln_s3_config_of(s)->base, "http://examplebucket.s3.amazonaws.com");
  memset(&r, 0, sizeof r);
  r.method = KILN_REMOTE_GET;
  snprintf(r.path, sizeof r.path, "test.txt");
  send_prepared(s, &f->L, &r, extra, 2);
  req_header(&f->L, "Authorization", auth, sizeof auth);
  assert_string_equal(
      auth, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  reference_signature(&f->L, "host;range;x-amz-content-sha256;x-amz-date", EMPTY_SHA256,
                      "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1", "s3", sig, creq);
  assert_string_equal(sig, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  kiln_s3_free(s);
}

/* Every request kiln sends, path-style under a prefix, signed as the
 * reference signer says: a blob PUT (its name is its hash), a record PUT (the
 * document hashed), HEAD and DELETE (the empty hash); a PUT is write-once;
 * no "Expect" and no removal header is signed; a session token is sent and
 * signed. */
static void test_sigv4_kiln_requests(void **state) {
  fixture *f = *state;
  static const char blob[] = "\x7f"
                             "ELF not really, a blob";
  static const char doc[] = "{\"schema\":\"kiln-record/1\"}";
  const char *extra[] = {"x-amz-date: 20240102T030405Z"};
  char digest[65], doc_hash[65], path[160];
  listener_start(&f->L);
  f->listening = 1;
  assert_int_equal(kiln_sha256_hex(digest, blob, sizeof blob - 1), KILN_OK);
  assert_int_equal(kiln_sha256_hex(doc_hash, doc, sizeof doc - 1), KILN_OK);
  env("AWS_ACCESS_KEY_ID", "AKIDKILNTEST");
  env("AWS_SECRET_ACCESS_KEY", "kiln/secret+KEY");
  env("AWS_REGION", "eu-west-3");
  env("KILN_S3_ENDPOINT", "https://objects.example.net:9000/");
  for (int with_token = 0; with_token < 2; with_token++) {
    kiln_s3 *s = NULL;
    if (with_token) env("AWS_SESSION_TOKEN", "FwoGZXIvYXdzEXAMPLETOKEN//+=");
    new_s3(&s, "s3://team-bucket/kiln/v1/");
    assert_string_equal(kiln_s3_config_of(s)->base,
                        "https://objects.example.net:9000/team-bucket/kiln/v1");
    for (int m = 0; m < 4; m++) {
      kiln_remote_req r;
      char sh[256], sig[65], want[256], creq[65], v[256], want_sh[256];
      const char *payload = m == 0 ? digest : m == 1 ? doc_hash : EMPTY_SHA256;
      memset(&r, 0, sizeof r);
      r.method = m < 2 ? KILN_REMOTE_PUT : m == 2 ? KILN_REMOTE_HEAD : KILN_REMOTE_DELETE;
      r.body = m == 0 ? (const void *)blob : m == 1 ? (const void *)doc : NULL;
      r.body_len = m == 0 ? sizeof blob - 1 : m == 1 ? sizeof doc - 1 : 0;
      snprintf(path, sizeof path, m == 0 ? "cas/%s" : "ac/%s", digest);
      snprintf(r.path, sizeof r.path, "%s", path);
      /* curl over https to a plain listener would fail: sign http, compare the rest */
      if (strncmp(kiln_s3_config_of(s)->base, "https://", 8) == 0) {
        kiln_s3_config *c = (kiln_s3_config *)kiln_s3_config_of(s);
        char base[2048];
        snprintf(base, sizeof base, "http://%s", c->base + 8);
        snprintf(c->base, sizeof c->base, "%s", base);
      }
      send_prepared(s, &f->L, &r, extra, 1);
      auth_parts(&f->L, sh, sizeof sh, sig);
      snprintf(want_sh, sizeof want_sh, "host%s;x-amz-content-sha256;x-amz-date%s",
               r.method == KILN_REMOTE_PUT ? ";if-none-match" : "",
               with_token ? ";x-amz-security-token" : "");
      assert_string_equal(sh, want_sh);
      req_header(&f->L, "x-amz-content-sha256", v, sizeof v);
      assert_string_equal(v, payload);
      req_header(&f->L, "If-None-Match", v, sizeof v);
      assert_string_equal(v, r.method == KILN_REMOTE_PUT ? "*" : "");
      req_header(&f->L, "x-amz-security-token", v, sizeof v);
      assert_string_equal(v, with_token ? "FwoGZXIvYXdzEXAMPLETOKEN//+=" : "");
      assert_int_equal(header_count(&f->L, "Authorization"), 1);
      assert_null(strstr(sh, "expect"));
      reference_signature(&f->L, sh, payload, "kiln/secret+KEY", "eu-west-3", "s3", v, creq);
      assert_string_equal(sig, v);
      snprintf(want, sizeof want, "%s /team-bucket/kiln/v1/%.160s ",
               kiln_remote_method_name(r.method), path);
      assert_memory_equal(f->L.last, want, strlen(want));
      {
        char cred[1024];
        req_header(&f->L, "Authorization", cred, sizeof cred);
        assert_non_null(strstr(cred, "Credential=AKIDKILNTEST/20240102/eu-west-3/s3/aws4_request"));
      }
    }
    kiln_s3_free(s);
  }
}

/* Anonymous: no header of kiln's and no signature. */
static void test_anonymous_is_unsigned(void **state) {
  fixture *f = *state;
  kiln_s3 *s = NULL;
  kiln_remote_req r;
  char v[256];
  listener_start(&f->L);
  f->listening = 1;
  env("KILN_S3_ENDPOINT", "http://public.example.org");
  new_s3(&s, "s3://public-bucket");
  assert_true(kiln_s3_config_of(s)->creds.anonymous);
  assert_string_equal(kiln_s3_config_of(s)->creds.source, "anonymous (no credentials found)");
  memset(&r, 0, sizeof r);
  r.method = KILN_REMOTE_GET;
  snprintf(r.path, sizeof r.path, "ac/x");
  send_prepared(s, &f->L, &r, NULL, 0);
  req_header(&f->L, "Authorization", v, sizeof v);
  assert_string_equal(v, "");
  req_header(&f->L, "x-amz-content-sha256", v, sizeof v);
  assert_string_equal(v, "");
  kiln_s3_free(s);
}

/* ---- the URL ---- */

static void test_url_rules(void **state) {
  static const struct {
    const char *url, *bucket, *prefix;
  } good[] = {{"s3://kiln-cache", "kiln-cache", ""},
              {"s3://kiln-cache/", "kiln-cache", ""},
              {"s3://kiln.cache.2/team/a", "kiln.cache.2", "team/a"},
              {"s3://abc/Team_A/v1.2/", "abc", "Team_A/v1.2"},
              {"s3://a-b/..x/y..", "a-b", "..x/y.."}};
  static const struct {
    const char *url, *says;
  } bad[] = {
      {"http://b/x", "s3://BUCKET[/PREFIX]"},
      {"s3://", "no bucket"},
      {"s3:///team", "no bucket"},
      {"s3://ab", "not 3 to 63"},
      {"s3://Kiln-Cache", "'K' at 1"},
      {"s3://kiln_cache", "'_' at 5"},
      {"s3://kiln cache", "a space at 5"},
      {"s3://k\xc3\xa9ln", "byte 0xc3 at 2"},
      {"s3://-kiln", "begin and end with a letter or a digit"},
      {"s3://kiln-", "begin and end"},
      {"s3://kiln..cache", "'..'"},
      {"s3://192.168.1.1", "IP address"},
      {"s3://xn--kiln", "reserves"},
      {"s3://kiln-s3alias", "reserves"},
      {"s3://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "longer than 63"},
      {"s3://AKID:secret@bucket/x", "credentials"},
      {"s3://bucket:9000/x", "credentials or a port"},
      {"s3://bucket/team/../other", "'..' segment"},
      {"s3://bucket/team/./a", "'.' or '..' segment"},
      {"s3://bucket/..", "segment"},
      {"s3://bucket//team", "empty"},
      {"s3://bucket/team//a", "empty"},
      {"s3://bucket/team a", "a space at 5"},
      {"s3://bucket/t\xc3\xa9", "byte 0xc3 at 2"},
      {"s3://bucket/team?x=1", "'?' at 5"},
      {"s3://bucket/team%2Fa", "'%' at 5"},
      {"s3://bucket/team\\a", "'\\' at 5"},
  };
  char b[64], p[KILN_S3_PREFIX_MAX];
  (void)state;
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    assert_int_equal(kiln_s3_parse_url(good[i].url, b, sizeof b, p, sizeof p), KILN_OK);
    assert_string_equal(b, good[i].bucket);
    assert_string_equal(p, good[i].prefix);
  }
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    kiln_status st = kiln_s3_parse_url(bad[i].url, b, sizeof b, p, sizeof p);
    if (st != KILN_EINVAL || !strstr(kiln_last_error(), bad[i].says))
      fail_msg("%s: %d '%s' (wanted EINVAL saying '%s')", bad[i].url, st, kiln_last_error(),
               bad[i].says);
    assert_null(strstr(kiln_last_error(), "secret"));
  }
}

/* ---- settings: endpoint, region, addressing ---- */

static void test_endpoint_region_addressing_order(void **state) {
  /* each step sets one more variable (NULL var: none; "@config": writes
   * ~/.aws/config), then loads url (NULL: no load) */
  static const struct {
    const char *var, *value, *url;
    kiln_status rc;
    const char *region, *base, *says;
  } steps[] = {
      {NULL, NULL, "s3://kiln-test/p", KILN_OK, "us-east-1",
       "https://s3.us-east-1.amazonaws.com/kiln-test/p", NULL},
      {"@config", "[default]\nregion = ap-south-1\n[profile other]\nregion = sa-east-1\n",
       "s3://kiln-test/p", KILN_OK, "ap-south-1", "https://s3.ap-south-1.amazonaws.com/kiln-test/p",
       NULL},
      {"AWS_PROFILE", "other", "s3://kiln-test/p", KILN_OK, "sa-east-1",
       "https://s3.sa-east-1.amazonaws.com/kiln-test/p", NULL},
      {"AWS_DEFAULT_REGION", "eu-north-1", "s3://kiln-test/p", KILN_OK, "eu-north-1", NULL, NULL},
      {"AWS_REGION", "us-west-2", "s3://kiln-test/p", KILN_OK, "us-west-2",
       "https://s3.us-west-2.amazonaws.com/kiln-test/p", NULL},
      {"AWS_ENDPOINT_URL", "http://generic:1", "s3://kiln-test/p", KILN_OK, "us-west-2",
       "http://generic:1/kiln-test/p", NULL},
      {"AWS_ENDPOINT_URL_S3", "http://s3only:2/", "s3://kiln-test/p", KILN_OK, NULL,
       "http://s3only:2/kiln-test/p", NULL},
      {"KILN_S3_ENDPOINT", "http://127.0.0.1:8333", "s3://kiln-test", KILN_OK, NULL,
       "http://127.0.0.1:8333/kiln-test", NULL},
      {"KILN_S3_ADDRESSING", "virtual", "s3://kiln-test", KILN_EINVAL, NULL, NULL, "IP address"},
      {"KILN_S3_ENDPOINT", "https://minio.internal:9000/s3", "s3://kiln-test/a/b", KILN_OK, NULL,
       "https://kiln-test.minio.internal:9000/s3/a/b", NULL},
      {"KILN_S3_ADDRESSING", "hosted", "s3://kiln-test", KILN_EINVAL, NULL, NULL,
       "KILN_S3_ADDRESSING"},
      {"KILN_S3_ADDRESSING", "path", NULL, KILN_OK, NULL, NULL, NULL},
      {"KILN_S3_ENDPOINT", "ftp://x", "s3://kiln-test", KILN_EINVAL, NULL, NULL,
       "KILN_S3_ENDPOINT must start with http"},
      {"KILN_S3_ENDPOINT", "http://AKID:secret@host", "s3://kiln-test", KILN_EINVAL, NULL, NULL,
       "KILN_S3_ENDPOINT has credentials in it"},
      {"KILN_S3_ENDPOINT", "http://host/a b", "s3://kiln-test", KILN_EINVAL, NULL, NULL,
       "its path has a space"},
      {"KILN_S3_ENDPOINT", "http://host", NULL, KILN_OK, NULL, NULL, NULL},
      {"AWS_REGION", "us east", "s3://kiln-test", KILN_EINVAL, NULL, NULL,
       "the AWS region from AWS_REGION"},
  };
  fixture *f = *state;
  kiln_s3_config c;
  for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
    kiln_status st;
    if (steps[i].var && strcmp(steps[i].var, "@config") == 0)
      aws_file(f, "config", steps[i].value);
    else if (steps[i].var)
      env(steps[i].var, steps[i].value);
    if (!steps[i].url) continue;
    st = kiln_s3_config_load(&c, steps[i].url);
    if (st != steps[i].rc) fail_msg("step %zu: %d: %s", i, st, kiln_last_error());
    if (steps[i].says && !strstr(kiln_last_error(), steps[i].says))
      fail_msg("step %zu: '%s' does not say '%s'", i, kiln_last_error(), steps[i].says);
    if (steps[i].region) assert_string_equal(c.region, steps[i].region);
    if (steps[i].base) assert_string_equal(c.base, steps[i].base);
    assert_null(strstr(kiln_last_error(), "secret@"));
    if (i == 4) {
      assert_string_equal(c.sigv4, "aws:amz:us-west-2:s3");
      assert_string_equal(c.region_from, "AWS_REGION");
      assert_string_equal(c.endpoint_from, "AWS, for the region");
    }
  }
}

/* ---- credentials ---- */

static void creds_ok(kiln_s3_creds *c, const char *ak, const char *sk, const char *tok,
                     const char *source) {
  assert_int_equal(kiln_s3_load_creds(c, NULL, 0), KILN_OK);
  assert_int_equal(c->anonymous, ak == NULL);
  assert_string_equal(c->access_key, ak ? ak : "");
  assert_string_equal(c->secret_key, sk ? sk : "");
  assert_string_equal(c->session_token, tok ? tok : "");
  assert_string_equal(c->source, source);
}

static void creds_fail(const char *says, const char *secret) {
  kiln_s3_creds c;
  assert_int_equal(kiln_s3_load_creds(&c, NULL, 0), KILN_EINVAL);
  if (!strstr(kiln_last_error(), says)) fail_msg("'%s' does not say '%s'", kiln_last_error(), says);
  if (secret) assert_null(strstr(kiln_last_error(), secret));
  assert_string_equal(c.secret_key, "");
}

static void test_credentials_order(void **state) {
  fixture *f = *state;
  kiln_s3_creds c;
  char cred[400], conf[400], src[600], region[64];
  snprintf(cred, sizeof cred, "%s/.aws/credentials", f->home);
  snprintf(conf, sizeof conf, "%s/.aws/config", f->home);
  /* nothing anywhere: anonymous */
  creds_ok(&c, NULL, NULL, NULL, "anonymous (no credentials found)");
  /* a config file with a region only: still anonymous, its region read */
  aws_file(f, "config", "# comment\n[default]\nregion = eu-central-1\n");
  assert_int_equal(kiln_s3_load_creds(&c, region, sizeof region), KILN_OK);
  assert_true(c.anonymous);
  assert_string_equal(region, "eu-central-1");
  /* keys in the config file's profile */
  aws_file(f, "config",
           "[default]\nregion=eu-central-1\naws_access_key_id=CONFAK\n"
           "aws_secret_access_key = CONF/SK\n");
  snprintf(src, sizeof src, "file %s, profile default", conf);
  creds_ok(&c, "CONFAK", "CONF/SK", NULL, src);
  /* the credentials file comes first */
  aws_file(f, "credentials",
           "[other]\naws_access_key_id = OTHERAK\naws_secret_access_key = O\n"
           "[default]\n  aws_access_key_id = IGNORED-INDENTED\n"
           "aws_access_key_id = FILEAK\naws_secret_access_key = FILE+SK/1\n"
           "aws_session_token = FILETOKEN\n");
  snprintf(src, sizeof src, "file %s, profile default", cred);
  creds_ok(&c, "FILEAK", "FILE+SK/1", "FILETOKEN", src);
  /* AWS_PROFILE picks the section; config's "[profile NAME]" */
  env("AWS_PROFILE", "other");
  snprintf(src, sizeof src, "file %s, profile other", cred);
  creds_ok(&c, "OTHERAK", "O", NULL, src);
  aws_file(f, "config",
           "[profile ci]\naws_access_key_id = CIAK\naws_secret_access_key = CISK\n"
           "[ci]\naws_access_key_id = NOT-A-CONFIG-PROFILE\n");
  env("AWS_PROFILE", "ci");
  snprintf(src, sizeof src, "file %s, profile ci", conf);
  creds_ok(&c, "CIAK", "CISK", NULL, src);
  /* the environment comes before every file */
  env("AWS_ACCESS_KEY_ID", "ENVAK");
  env("AWS_SECRET_ACCESS_KEY", "ENV/SK+");
  creds_ok(&c, "ENVAK", "ENV/SK+", NULL, "environment (AWS_ACCESS_KEY_ID)");
  env("AWS_SESSION_TOKEN", "ENVTOKEN");
  creds_ok(&c, "ENVAK", "ENV/SK+", "ENVTOKEN",
           "environment (AWS_ACCESS_KEY_ID, AWS_SESSION_TOKEN)");
  /* half a pair in the environment is an error naming both */
  unsetenv("AWS_SECRET_ACCESS_KEY");
  kiln_params_reset();
  creds_fail("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not", NULL);
  clean_env();
  /* files elsewhere */
  {
    char alt[400], altconf[400];
    snprintf(alt, sizeof alt, "%s/alt-credentials", f->dir);
    snprintf(altconf, sizeof altconf, "%s/alt-config", f->dir);
    write_file(alt, "[default]\naws_access_key_id = ALTAK\naws_secret_access_key = ALTSK\n");
    write_file(altconf, "[default]\nregion = af-south-1\n");
    env("AWS_SHARED_CREDENTIALS_FILE", alt);
    env("AWS_CONFIG_FILE", altconf);
    snprintf(src, sizeof src, "file %s, profile default", alt);
    creds_ok(&c, "ALTAK", "ALTSK", NULL, src);
    assert_int_equal(kiln_s3_load_creds(&c, region, sizeof region), KILN_OK);
    assert_string_equal(region, "af-south-1");
    /* a missing file named by a variable is skipped, as AWS's tools do */
    snprintf(alt, sizeof alt, "%s/none", f->dir);
    env("AWS_SHARED_CREDENTIALS_FILE", alt);
    env("AWS_CONFIG_FILE", alt);
    creds_ok(&c, NULL, NULL, NULL, "anonymous (no credentials found)");
    /* a file that cannot be read is an error naming it */
    env("AWS_SHARED_CREDENTIALS_FILE", f->dir); /* a directory */
    assert_int_equal(kiln_s3_load_creds(&c, NULL, 0), KILN_EIO);
    assert_non_null(strstr(kiln_last_error(), f->dir));
    clean_env();
  }
  /* a named profile that is nowhere */
  env("AWS_PROFILE", "nosuch");
  creds_fail("AWS_PROFILE=nosuch: no such profile", NULL);
  clean_env();
  /* a profile kiln cannot get credentials for yet */
  aws_file(f, "credentials", "[default]\n");
  aws_file(f, "config", "[default]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = base\n");
  creds_fail("role_arn, which kiln does not support yet", NULL);
  /* half a pair in a file; a bad value: the file and line, never the value */
  aws_file(f, "config", "");
  aws_file(f, "credentials", "[default]\naws_access_key_id = HALFAK\n");
  creds_fail("aws_access_key_id without aws_secret_access_key", NULL);
  aws_file(f, "credentials",
           "[default]\naws_access_key_id = AK\naws_secret_access_key = top secret value\n");
  creds_fail("line 3: aws_secret_access_key has a space", "top secret");
  env("AWS_ACCESS_KEY_ID", "AK");
  env("AWS_SECRET_ACCESS_KEY", "bad\tsecretvalue");
  creds_fail("AWS_SECRET_ACCESS_KEY has a space or a character", "secretvalue");
}

/* Web identity comes after the keys of the environment and the files: from
 * AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, else the config file's profile. */
static void test_web_identity_order(void **state) {
  fixture *f = *state;
  kiln_s3_creds c;
  char src[700], conf[400];
  snprintf(conf, sizeof conf, "%s/.aws/config", f->home);
  env("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/token");
  creds_fail("AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not", NULL);
  env("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/kiln");
  assert_int_equal(kiln_s3_load_creds(&c, NULL, 0), KILN_OK);
  assert_true(c.web_identity);
  assert_false(c.anonymous);
  assert_string_equal(c.access_key, "");
  assert_string_equal(c.token_file, "/var/run/secrets/token");
  assert_string_equal(c.role_arn, "arn:aws:iam::123456789012:role/kiln");
  assert_memory_equal(c.session_name, "kiln-", 5);
  assert_string_equal(c.source, "web identity (role arn:aws:iam::123456789012:role/kiln from "
                                "AWS_ROLE_ARN, token file /var/run/secrets/token)");
  env("AWS_ROLE_SESSION_NAME", "job 7");
  creds_fail("role session name", NULL);
  env("AWS_ROLE_SESSION_NAME", "job-7@node.3");
  assert_int_equal(kiln_s3_load_creds(&c, NULL, 0), KILN_OK);
  assert_string_equal(c.session_name, "job-7@node.3");
  env("AWS_ROLE_ARN", "role/kiln");
  creds_fail("does not begin with arn:", NULL);
  /* keys in a file come first */
  env("AWS_ROLE_ARN", "arn:aws:iam::1:role/k");
  aws_file(f, "credentials", "[default]\naws_access_key_id = FAK\naws_secret_access_key = FSK\n");
  assert_int_equal(kiln_s3_load_creds(&c, NULL, 0), KILN_OK);
  assert_false(c.web_identity);
  assert_string_equal(c.access_key, "FAK");
  aws_file(f, "credentials", "");
  clean_env();
  /* the config file's profile */
  aws_file(f, "config",
           "[profile pod]\nweb_identity_token_file = /tok\nrole_arn = arn:aws:iam::2:role/p\n"
           "role_session_name = podsession\n");
  env("AWS_PROFILE", "pod");
  assert_int_equal(kiln_s3_load_creds(&c, NULL, 0), KILN_OK);
  assert_true(c.web_identity);
  assert_string_equal(c.token_file, "/tok");
  assert_string_equal(c.session_name, "podsession");
  snprintf(src, sizeof src,
           "web identity (role arn:aws:iam::2:role/p from %s, profile pod, token "
           "file /tok)",
           conf);
  assert_string_equal(c.source, src);
  aws_file(f, "config", "[profile pod]\nweb_identity_token_file = /tok\n");
  creds_fail("web_identity_token_file without role_arn", NULL);
}

/* ---- web identity through STS, and credentials renewed on ExpiredToken ---- */

#define STS_OK                                                                                     \
  "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"              \
  "<SessionToken>STSsessTOKEN+/=</SessionToken><SecretAccessKey>STSsecret/KEY+</SecretAccessKey>"  \
  "<Expiration>2026-11-28T12:00:00Z</Expiration><AccessKeyId>ASIASTSKEY</AccessKeyId>"             \
  "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"

static void test_sts_parse(void **state) {
  kiln_s3_creds c;
  (void)state;
  memset(&c, 0, sizeof c);
  assert_int_equal(kiln_sts_parse(STS_OK, strlen(STS_OK), &c), KILN_OK);
  assert_string_equal(c.access_key, "ASIASTSKEY");
  assert_string_equal(c.secret_key, "STSsecret/KEY+");
  assert_string_equal(c.session_token, "STSsessTOKEN+/=");
  assert_string_equal(c.expiration, "2026-11-28T12:00:00Z");
  /* a missing field, a value with a space or an entity, no <Credentials>: refused */
  static const char *const bad[] = {
      "<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey></Credentials>",
      "<Credentials><AccessKeyId>A B</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
      "<SessionToken>T</SessionToken></Credentials>",
      "<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S&amp;</SecretAccessKey>"
      "<SessionToken>T</SessionToken></Credentials>",
      "<AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey><SessionToken>T</"
      "SessionToken>",
      "<Credentials><AccessKeyId>A</AccessKeyIdX><SecretAccessKey>S</SecretAccessKey>"
      "<SessionToken>T</SessionToken></Credentials>",
      ""};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    memset(&c, 0, sizeof c);
    assert_int_equal(kiln_sts_parse(bad[i], strlen(bad[i]), &c), KILN_EREMOTE);
    assert_string_equal(c.secret_key, "");
  }
}

static void get_ok_or(kiln_s3 *s, kiln_status want, const char *says) {
  kiln_remote_req r;
  memset(&r, 0, sizeof r);
  r.method = KILN_REMOTE_GET;
  r.out_fd = -1;
  r.max_bytes = 65536;
  snprintf(r.path, sizeof r.path, "ac/k");
  assert_int_equal(kiln_remote_s3.run(s, &r, 1, NULL, NULL), KILN_OK);
  assert_int_equal(r.rc, want);
  if (says && !strstr(r.error, says)) fail_msg("'%s' does not say '%s'", r.error, says);
  kiln_remote_reqs_reset(&r, 1);
}

static void test_web_identity_through_sts(void **state) {
  fixture *f = *state;
  kiln_s3 *s = NULL;
  kiln_remote_config cfg;
  char url[64], tokfile[400], v[256];
  listener_start(&f->L);
  f->listening = 1;
  snprintf(url, sizeof url, "http://127.0.0.1:%d", f->L.port);
  snprintf(tokfile, sizeof tokfile, "%s/token", f->dir);
  write_file(tokfile, "eyJOIDCtoken.payload+sig/=\n");
  env("KILN_S3_ENDPOINT", "http://s3.invalid");
  env("AWS_ENDPOINT_URL_STS", url);
  env("AWS_WEB_IDENTITY_TOKEN_FILE", tokfile);
  env("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/kiln");
  env("AWS_ROLE_SESSION_NAME", "ci-7");
  answer(&f->L, 200, NULL, STS_OK);
  new_s3(&s, "s3://kiln-test");
  {
    const kiln_s3_creds *c = &kiln_s3_config_of(s)->creds;
    assert_string_equal(c->access_key, "ASIASTSKEY");
    assert_string_equal(c->secret_key, "STSsecret/KEY+");
    assert_string_equal(c->session_token, "STSsessTOKEN+/=");
    assert_non_null(strstr(c->source, "web identity (role arn:aws:iam::123456789012:role/kiln"));
  }
  /* one unsigned POST to STS's root, the form percent-encoded, the token's newline dropped */
  assert_memory_equal(f->L.last, "POST / ", 7);
  req_header(&f->L, "Authorization", v, sizeof v);
  assert_string_equal(v, "");
  assert_non_null(strstr(f->L.last,
                         "\r\n\r\nAction=AssumeRoleWithWebIdentity&Version=2011-06-15&"
                         "RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fkiln&"
                         "RoleSessionName=ci-7&WebIdentityToken=eyJOIDCtoken.payload%2Bsig"
                         "%2F%3D"));
  kiln_s3_free(s);
  /* STS refuses: its code and what it means; never the token */
  answer(&f->L, 400, NULL,
         "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>"
         "<Message>eyJOIDCtoken is bad</Message></Error></ErrorResponse>");
  memset(&cfg, 0, sizeof cfg);
  snprintf(cfg.base, sizeof cfg.base, "s3://kiln-test");
  cfg.connect_timeout_ms = 2000;
  cfg.timeout_ms = 5000;
  assert_int_equal(kiln_s3_new(&s, &cfg), KILN_EPERM);
  assert_non_null(
      strstr(kiln_last_error(), "HTTP 400 InvalidIdentityToken: the token in the file"));
  assert_non_null(strstr(kiln_last_error(), url));
  assert_null(strstr(kiln_last_error(), "eyJOIDC"));
  /* a 5xx is retried; STS away is the remote's failure, not kiln's: every
   * request fails saying why, and STS is asked again at each run */
  answer(&f->L, 503, NULL, "");
  cfg.retries = 1;
  cfg.parallel = 2;
  cfg.breaker_threshold = 100;
  f->L.count = 0;
  assert_int_equal(kiln_s3_new(&s, &cfg), KILN_OK);
  assert_int_equal(f->L.count, 2);
  get_ok_or(s, KILN_EREMOTE, "GET ac/k: web identity: STS at");
  assert_int_equal(f->L.count, 4);
  answer(&f->L, 200, NULL, STS_OK);
  get_ok_or(s, KILN_EREMOTE, NULL); /* STS answers; s3.invalid does not */
  assert_int_equal(f->L.count, 5);
  assert_string_equal(kiln_s3_config_of(s)->creds.access_key, "ASIASTSKEY");
  kiln_s3_free(s);
  /* a token file that is not there */
  env("AWS_WEB_IDENTITY_TOKEN_FILE", "/nonexistent/token");
  assert_int_equal(kiln_s3_new(&s, &cfg), KILN_ENOTFOUND);
  assert_non_null(strstr(kiln_last_error(), "the token file /nonexistent/token cannot be read"));
}

static void no_secret(const char *text);

/* ExpiredToken: the credentials read again from their source and the
 * request retried; the same credentials, or a second ExpiredToken after a
 * renewal, is an error. */
static void test_expired_token_renewed(void **state) {
  fixture *f = *state;
  kiln_s3 *s = NULL;
  char url[64], v[256];
  listener_start(&f->L);
  f->listening = 1;
  snprintf(url, sizeof url, "http://127.0.0.1:%d", f->L.port);
  env("KILN_S3_ENDPOINT", url);
  aws_file(
      f, "credentials",
      "[default]\naws_access_key_id=AK1\naws_secret_access_key=SK1\naws_session_token=tok-1\n");
  new_s3(&s, "s3://kiln-test");
  /* the file was rewritten by whatever renews it; the server expires tok-1 */
  aws_file(
      f, "credentials",
      "[default]\naws_access_key_id=AK2\naws_secret_access_key=SK2\naws_session_token=tok-2\n");
  snprintf(f->L.expired_token, sizeof f->L.expired_token, "tok-1");
  answer(&f->L, 200, NULL, "hello");
  f->L.count = 0;
  get_ok_or(s, KILN_OK, NULL);
  assert_int_equal(f->L.count, 2);
  assert_int_equal(f->L.expired, 1);
  req_header(&f->L, "x-amz-security-token", v, sizeof v);
  assert_string_equal(v, "tok-2");
  assert_string_equal(kiln_s3_config_of(s)->creds.access_key, "AK2");
  /* tok-2 expires and the file still has it: an error, after one re-read */
  snprintf(f->L.expired_token, sizeof f->L.expired_token, "tok-2");
  f->L.count = 0;
  get_ok_or(s, KILN_EPERM, "HTTP 400 ExpiredToken: expired, and their source has no newer ones");
  assert_int_equal(f->L.count, 1);
  /* renewed, and the new ones refused at once too: an error, not a loop */
  aws_file(
      f, "credentials",
      "[default]\naws_access_key_id=AK3\naws_secret_access_key=SK3\naws_session_token=tok-3\n");
  f->L.expired_token[0] = '\0';
  answer(&f->L, 400, NULL, S3_ERR("ExpiredToken"));
  f->L.count = 0;
  get_ok_or(s, KILN_EPERM, "HTTP 400 ExpiredToken: expired again right after renewal");
  assert_int_equal(f->L.count, 2);
  no_secret(kiln_last_error());
  kiln_s3_free(s);
}

/* ---- S3's answers ---- */

static kiln_http_verdict judge(const kiln_s3_config *c, kiln_remote_method m, long st,
                               const char *body, const char *date, kiln_status *rc, char *detail) {
  detail[0] = '\0';
  return kiln_s3_judge_answer(c, m, st, body, body ? strlen(body) : 0, date ? date : "", "",
                              curl_getdate("Wed, 01 May 2024 12:00:00 GMT", NULL), rc, detail, 200);
}

static void test_answers_explained(void **state) {
  kiln_s3_config c;
  kiln_status rc;
  char d[200], code[64];
  (void)state;
  memset(&c, 0, sizeof c);
  snprintf(c.bucket, sizeof c.bucket, "kiln-test");
  snprintf(c.endpoint, sizeof c.endpoint, "http://127.0.0.1:9");
  snprintf(c.region, sizeof c.region, "us-east-1");
  kiln_s3_error_code(S3_ERR("SlowDown"), strlen(S3_ERR("SlowDown")), code, sizeof code);
  assert_string_equal(code, "SlowDown");
  kiln_s3_error_code("<Error><Code>A<b>", 16, code, sizeof code);
  assert_string_equal(code, "");
  kiln_s3_error_code("<Code>Evil\r\nHeader</Code>", 25, code, sizeof code);
  assert_string_equal(code, "");
  kiln_s3_error_code("<Code>NoEnd", 11, code, sizeof code);
  assert_string_equal(code, "");
  /* write-once */
  assert_int_equal(judge(&c, KILN_REMOTE_PUT, 412, S3_ERR("PreconditionFailed"), NULL, &rc, d),
                   KILN_HTTP_SUCCESS);
  assert_int_equal(
      judge(&c, KILN_REMOTE_PUT, 409, S3_ERR("ConditionalRequestConflict"), NULL, &rc, d),
      KILN_HTTP_RETRY);
  assert_non_null(strstr(d, "ConditionalRequestConflict"));
  /* misses and a missing bucket */
  assert_int_equal(judge(&c, KILN_REMOTE_GET, 404, S3_ERR("NoSuchKey"), NULL, &rc, d),
                   KILN_HTTP_AS_IS);
  assert_int_equal(judge(&c, KILN_REMOTE_HEAD, 404, "", NULL, &rc, d), KILN_HTTP_AS_IS);
  assert_int_equal(judge(&c, KILN_REMOTE_GET, 404, S3_ERR("NoSuchBucket"), NULL, &rc, d),
                   KILN_HTTP_FAIL);
  assert_int_equal(rc, KILN_EREMOTE);
  assert_non_null(strstr(d, "no bucket kiln-test at http://127.0.0.1:9"));
  /* 403: the likely cause */
  assert_int_equal(judge(&c, KILN_REMOTE_GET, 403, S3_ERR("SignatureDoesNotMatch"), NULL, &rc, d),
                   KILN_HTTP_FAIL);
  assert_int_equal(rc, KILN_EPERM);
  assert_non_null(strstr(d, "SignatureDoesNotMatch: the signature does not match: the secret key"));
  judge(&c, KILN_REMOTE_GET, 403, S3_ERR("InvalidAccessKeyId"), NULL, &rc, d);
  assert_non_null(strstr(d, "does not know the access key"));
  judge(&c, KILN_REMOTE_GET, 403, S3_ERR("RequestTimeTooSkewed"), "Wed, 01 May 2024 11:00:00 GMT",
        &rc, d);
  assert_non_null(strstr(d, "this host's clock is 3600 s ahead of the server's"));
  judge(&c, KILN_REMOTE_GET, 403, S3_ERR("RequestTimeTooSkewed"), "Wed, 01 May 2024 12:20:00 GMT",
        &rc, d);
  assert_non_null(strstr(d, "1200 s behind the server's"));
  judge(&c, KILN_REMOTE_PUT, 403, S3_ERR("AccessDenied"), NULL, &rc, d);
  assert_non_null(strstr(d, "does not allow writes here"));
  c.creds.anonymous = 1;
  judge(&c, KILN_REMOTE_GET, 403, S3_ERR("AccessDenied"), NULL, &rc, d);
  assert_non_null(strstr(d, "anonymous"));
  c.creds.anonymous = 0;
  judge(&c, KILN_REMOTE_HEAD, 403, "", NULL, &rc, d);
  assert_int_equal(rc, KILN_EPERM);
  assert_non_null(strstr(d, "the signature, the clock, the credentials or a policy"));
  judge(&c, KILN_REMOTE_GET, 400, S3_ERR("ExpiredToken"), NULL, &rc, d);
  assert_int_equal(rc, KILN_EPERM);
  assert_non_null(strstr(d, "session token has expired"));
  /* retried */
  assert_int_equal(judge(&c, KILN_REMOTE_GET, 503, S3_ERR("SlowDown"), NULL, &rc, d),
                   KILN_HTTP_RETRY);
  assert_non_null(strstr(d, "KILN_REMOTE_PARALLEL"));
  assert_int_equal(judge(&c, KILN_REMOTE_PUT, 500, S3_ERR("InternalError"), NULL, &rc, d),
                   KILN_HTTP_RETRY);
  assert_int_equal(judge(&c, KILN_REMOTE_PUT, 400, S3_ERR("RequestTimeout"), NULL, &rc, d),
                   KILN_HTTP_RETRY);
  /* the wrong region */
  assert_int_equal(judge(&c, KILN_REMOTE_GET, 301,
                         "<Error><Code>PermanentRedirect</Code><Region>eu-west-1</Region></Error>",
                         NULL, &rc, d),
                   KILN_HTTP_FAIL);
  assert_non_null(strstr(d, "set AWS_REGION=eu-west-1"));
  assert_int_equal(
      kiln_s3_judge_answer(&c, KILN_REMOTE_HEAD, 301, "", 0, "", "ap-east-1", 0, &rc, d, sizeof d),
      KILN_HTTP_FAIL);
  assert_non_null(strstr(d, "set AWS_REGION=ap-east-1"));
}

/* ---- the backend end to end, and no secret in any log or error ---- */

static char logbuf[1 << 16];
static size_t loglen;

static void capture(kiln_log_level level, const char *msg, void *user) {
  (void)level, (void)user;
  loglen += (size_t)snprintf(logbuf + loglen, sizeof logbuf - loglen, "%s\n", msg);
  if (loglen >= sizeof logbuf) loglen = sizeof logbuf - 1;
}

static void no_secret(const char *text) {
  static const char *const secrets[] = {"S3cr3tKEYvalue", "T0kenValue", "fileSECRET", "fileTOKEN"};
  for (size_t i = 0; i < sizeof secrets / sizeof *secrets; i++)
    if (strstr(text, secrets[i])) fail_msg("a secret (%s) in: %s", secrets[i], text);
}

static void run_one(kiln_s3 *s, kiln_remote_method m, const char *path, kiln_remote_req *r) {
  memset(r, 0, sizeof *r);
  r->method = m;
  r->out_fd = -1;
  r->max_bytes = 65536;
  r->body = "doc";
  r->body_len = m == KILN_REMOTE_PUT ? 3 : 0;
  snprintf(r->path, sizeof r->path, "%s", path);
  assert_int_equal(kiln_remote_s3.run(s, r, 1, NULL, NULL), KILN_OK);
  no_secret(r->error);
}

static void test_backend_and_no_secret_in_logs(void **state) {
  fixture *f = *state;
  kiln_s3 *s = NULL;
  kiln_remote_req r;
  kiln_log_level old = kiln_log_get_level();
  char url[64], v[256];
  listener_start(&f->L);
  f->listening = 1;
  loglen = 0;
  logbuf[0] = '\0';
  kiln_log_set_callback(capture, NULL);
  kiln_log_set_level(KILN_LOG_DEBUG);
  snprintf(url, sizeof url, "http://127.0.0.1:%d", f->L.port);
  env("KILN_S3_ENDPOINT", url);
  env("AWS_ACCESS_KEY_ID", "AKIDLOGTEST");
  env("AWS_SECRET_ACCESS_KEY", "S3cr3tKEYvalue");
  env("AWS_SESSION_TOKEN", "T0kenValue");
  new_s3(&s, "s3://kiln-test/team");
  /* a write-once PUT that finds the object there: success */
  answer(&f->L, 412, NULL, S3_ERR("PreconditionFailed"));
  run_one(s, KILN_REMOTE_PUT, "ac/k1", &r);
  assert_int_equal(r.rc, KILN_OK);
  assert_memory_equal(f->L.last, "PUT /kiln-test/team/ac/k1 ", 26);
  req_header(&f->L, "x-amz-security-token", v, sizeof v);
  assert_string_equal(v, "T0kenValue");
  /* 409 is retried, then an error that never counts towards the breaker */
  answer(&f->L, 409, NULL, S3_ERR("ConditionalRequestConflict"));
  f->L.count = 0;
  run_one(s, KILN_REMOTE_PUT, "ac/k2", &r);
  assert_int_equal(r.rc, KILN_EREMOTE);
  assert_int_equal(f->L.count, 2);
  /* a GET refused: the cause, from the error document */
  answer(&f->L, 403, NULL, S3_ERR("SignatureDoesNotMatch"));
  run_one(s, KILN_REMOTE_GET, "ac/k3", &r);
  assert_int_equal(r.rc, KILN_EPERM);
  assert_non_null(strstr(r.error, "GET ac/k3: HTTP 403 SignatureDoesNotMatch"));
  /* a HEAD refused has no body: one GET says why */
  f->L.count = 0;
  run_one(s, KILN_REMOTE_HEAD, "ac/k4", &r);
  assert_int_equal(r.rc, KILN_EPERM);
  assert_non_null(strstr(r.error, "HEAD ac/k4: HTTP 403 SignatureDoesNotMatch"));
  assert_int_equal(f->L.count, 2);
  /* a miss, a missing bucket, a 200 */
  answer(&f->L, 404, NULL, S3_ERR("NoSuchKey"));
  run_one(s, KILN_REMOTE_GET, "ac/k5", &r);
  assert_int_equal(r.rc, KILN_ENOTFOUND);
  answer(&f->L, 404, NULL, S3_ERR("NoSuchBucket"));
  run_one(s, KILN_REMOTE_GET, "ac/k6", &r);
  assert_int_equal(r.rc, KILN_EREMOTE);
  assert_non_null(strstr(r.error, "NoSuchBucket"));
  answer(&f->L, 200, NULL, "hello");
  run_one(s, KILN_REMOTE_GET, "ac/k7", &r);
  assert_int_equal(r.rc, KILN_OK);
  assert_string_equal((const char *)r.data, "hello");
  kiln_remote_reqs_reset(&r, 1);
  kiln_s3_free(s);
  /* credentials from a file; then a file with a bad line holding a secret */
  clean_env();
  env("KILN_S3_ENDPOINT", url);
  aws_file(f, "credentials",
           "[default]\naws_access_key_id=AKFILE\naws_secret_access_key=fileSECRET\n"
           "aws_session_token=fileTOKEN\n");
  new_s3(&s, "s3://kiln-test/team");
  answer(&f->L, 403, NULL, S3_ERR("InvalidAccessKeyId"));
  run_one(s, KILN_REMOTE_GET, "ac/k8", &r);
  assert_int_equal(r.rc, KILN_EPERM);
  kiln_s3_free(s);
  aws_file(f, "credentials",
           "[default]\naws_access_key_id=AKFILE\n"
           "aws_secret_access_key=fileSECRET and more\n");
  {
    kiln_remote_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.base, sizeof cfg.base, "s3://kiln-test");
    assert_int_equal(kiln_s3_new(&s, &cfg), KILN_EINVAL);
    no_secret(kiln_last_error());
  }
  kiln_log_set_level(old);
  kiln_log_set_callback(NULL, NULL);
  /* the log did say things, at debug: where the credentials came from, each request */
  assert_non_null(
      strstr(logbuf, "credentials: environment (AWS_ACCESS_KEY_ID, AWS_SESSION_TOKEN)"));
  assert_non_null(strstr(logbuf, "remote GET ac/k3: status 403"));
  no_secret(logbuf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_sigv4_get_vanilla_vector, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sigv4_s3_get_object_vector, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sigv4_kiln_requests, setup, teardown),
      cmocka_unit_test_setup_teardown(test_anonymous_is_unsigned, setup, teardown),
      cmocka_unit_test_setup_teardown(test_url_rules, setup, teardown),
      cmocka_unit_test_setup_teardown(test_endpoint_region_addressing_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_credentials_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_web_identity_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sts_parse, setup, teardown),
      cmocka_unit_test_setup_teardown(test_web_identity_through_sts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_expired_token_renewed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_answers_explained, setup, teardown),
      cmocka_unit_test_setup_teardown(test_backend_and_no_secret_in_logs, setup, teardown),
  };
  curl_global_init(CURL_GLOBAL_DEFAULT);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
