/* Internal: the s3:// backend of the remote cache (docs/remote-cache.md, "S3").
 *   cache/remote/s3_config.c  the URL, the endpoint, the region, the addressing
 *                             and the credentials, from the environment and
 *                             AWS's shared files, in the order AWS's tools use
 *   cache/remote/sts.c        web identity: AssumeRoleWithWebIdentity at STS,
 *                             how pods on Kubernetes get credentials
 *   cache/remote/s3.c         the backend: http.c's transfer loop with AWS
 *                             Signature V4 (libcurl's CURLOPT_AWS_SIGV4), the
 *                             write-once PUT, S3's error answers explained and
 *                             credentials renewed once when they expire */
#ifndef KILN_CACHE_REMOTE_S3_H
#define KILN_CACHE_REMOTE_S3_H

#include <stddef.h>
#include <time.h>

#include <curl/curl.h>

#include "cache/remote/http.h"
#include "cache/remote/remote.h"

/* Where the credentials came from, and what they are. The values never leave
 * this struct but for libcurl's options and the x-amz-security-token header:
 * not into a log line, an error, --json or the doctor. */
typedef struct kiln_s3_creds {
  char access_key[128];
  char secret_key[128];
  char session_token[4096]; /* "" none */
  int anonymous;            /* no credentials found: unsigned requests, reads only */
  char source[640];         /* "environment (AWS_ACCESS_KEY_ID)", "file /h/.aws/credentials
                               profile ci", "web identity (...)", "anonymous (no credentials
                               found)" */
  /* web identity: kiln_s3_load_creds fills these (the key pair stays empty),
   * kiln_sts_web_identity asks STS for the key pair */
  int web_identity;
  char token_file[1024]; /* the OIDC token's file (AWS_WEB_IDENTITY_TOKEN_FILE) */
  char role_arn[256];    /* AWS_ROLE_ARN */
  char session_name[65]; /* AWS_ROLE_SESSION_NAME, else kiln-<unix time> */
  char expiration[32];   /* STS's <Expiration>, "" when not from STS */
} kiln_s3_creds;

#define KILN_S3_PREFIX_MAX 512

typedef struct kiln_s3_config {
  char bucket[64];
  char prefix[KILN_S3_PREFIX_MAX]; /* "" or "team/a": no leading or trailing '/' */
  char endpoint[1024];             /* scheme://host[:port][/path], no trailing '/' */
  char endpoint_from[64];          /* "KILN_S3_ENDPOINT", ..., "AWS_REGION" (AWS's own) */
  char region[64];
  char region_from[640];   /* "AWS_REGION", "file ... profile X", "default" */
  int virtual_host;        /* KILN_S3_ADDRESSING=virtual: BUCKET.host */
  char base[2048];         /* the URL the objects' paths ("ac/<key>") hang under */
  char sigv4[96];          /* "aws:amz:REGION:s3" for CURLOPT_AWS_SIGV4 */
  char sts_endpoint[1024]; /* web identity's STS: AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL,
                              else https://sts.REGION.amazonaws.com */
  char sts_from[64];
  kiln_s3_creds creds;
} kiln_s3_config;

/* "s3://BUCKET[/PREFIX]" into its parts, checked: the bucket by S3's naming
 * rules (3 to 63 of a-z 0-9 . -, a letter or digit at each end, no "..", not
 * an IP address), the prefix of [A-Za-z0-9._/-] with no empty, "." or ".."
 * segment (one trailing '/' is dropped). KILN_EINVAL saying what is wrong. */
kiln_status kiln_s3_parse_url(const char *url, char *bucket, size_t bucket_cap, char *prefix,
                              size_t prefix_cap);
kiln_status kiln_s3_check_bucket(const char *bucket);
kiln_status kiln_s3_check_prefix(const char *prefix);

/* The credentials, in AWS's order: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
 * (+ AWS_SESSION_TOKEN); else the profile (AWS_PROFILE, default "default")
 * in the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, else
 * ~/.aws/credentials), then in the config file (AWS_CONFIG_FILE, else
 * ~/.aws/config, sections "[profile NAME]", "[default]"); else web identity
 * (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN [+ AWS_ROLE_SESSION_NAME],
 * else the profile's web_identity_token_file + role_arn [+
 * role_session_name]): out->web_identity set, the key pair for
 * kiln_sts_web_identity to get; else anonymous.
 * region (may be NULL) gets the profile's region from the config file, ""
 * when it has none. KILN_EINVAL for half a key pair, half of web identity's
 * pair, a named profile that is in neither file, or a profile that gets its
 * credentials in a way kiln does not support yet (role_arn with
 * source_profile, sso_*, credential_process...); KILN_EIO for a file that
 * exists but cannot be read. Never a value in a message. */
kiln_status kiln_s3_load_creds(kiln_s3_creds *out, char *region, size_t region_cap);

/* Web identity: POSTs AssumeRoleWithWebIdentity (unsigned, as AWS's tools
 * do) with c->role_arn, c->session_name and the token read from
 * c->token_file to endpoint (sts_endpoint of the config), bounded by cfg's
 * timeouts and retries and using its CA file; fills c's key pair, session
 * token and expiration. Errors name the endpoint, the role and STS's error
 * code, never the token or a key. */
kiln_status kiln_sts_web_identity(kiln_s3_creds *c, const char *endpoint,
                                  const kiln_remote_config *cfg);
/* The key pair, session token and expiration of an STS answer's
 * <Credentials> (exposed for the tests). KILN_EREMOTE when one is missing or
 * not fit to be a header's value. */
kiln_status kiln_sts_parse(const char *body, size_t len, kiln_s3_creds *c);

/* Everything for url: kiln_s3_parse_url, the credentials, the region
 * (AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1), the endpoint
 * (KILN_S3_ENDPOINT, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else
 * https://s3.REGION.amazonaws.com), the addressing (KILN_S3_ADDRESSING
 * path|virtual, default path), the base URL they make and the STS endpoint.
 * Web identity's STS call is not made here: kiln_s3_new makes it. */
kiln_status kiln_s3_config_load(kiln_s3_config *out, const char *url);
/* Zeroes the secrets. */
void kiln_s3_config_wipe(kiln_s3_config *c);

/* The backend (the remote's impl for an s3:// URL). */
typedef struct kiln_s3 kiln_s3;
extern const kiln_remote_backend kiln_remote_s3;
/* cfg->base is the s3:// URL (its token and netrc are not used). */
kiln_status kiln_s3_new(kiln_s3 **out, const kiln_remote_config *cfg);
void kiln_s3_free(kiln_s3 *s);
const kiln_s3_config *kiln_s3_config_of(const kiln_s3 *s);
/* The http.c hook that makes one attempt's request: x-amz-content-sha256
 * (a blob's name is its SHA-256; anything else is hashed; no body: the
 * empty hash), If-None-Match: * on a PUT, x-amz-security-token with a
 * session token, and CURLOPT_AWS_SIGV4 with the key pair; nothing with
 * anonymous credentials. Exposed for the signing tests. */
kiln_status kiln_s3_prepare(kiln_s3 *s, CURL *easy, kiln_remote_req *r,
                            struct curl_slist **headers);

/* What an S3 answer that is not 2xx means (the judge hook, without libcurl):
 * method and status, body (S3's XML error document, or "" for a HEAD), the
 * Date and x-amz-bucket-region headers ("" when absent), now (this host's
 * clock, for RequestTimeTooSkewed). Sets *rc and detail for RETRY and FAIL. */
kiln_http_verdict kiln_s3_judge_answer(const kiln_s3_config *c, kiln_remote_method method,
                                       long status, const char *body, size_t body_len,
                                       const char *date, const char *bucket_region, time_t now,
                                       kiln_status *rc, char *detail, size_t cap);
/* The <Code> of an S3 error document ("" when there is none), bounded. */
void kiln_s3_error_code(const char *body, size_t len, char *out, size_t cap);

#endif
