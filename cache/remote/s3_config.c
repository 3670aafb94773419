/* Where an s3:// remote's settings come from (cache/remote/s3.h): the URL's
 * bucket and prefix, checked; the credentials, region and endpoint in the
 * order AWS's own tools use (the environment, then the shared files
 * ~/.aws/credentials and ~/.aws/config), so a host set up for the aws CLI
 * needs nothing more; the base URL of the objects.
 *
 * Every variable is a row of common/params.def. A secret (the secret key,
 * the session token) is copied only into kiln_s3_creds: every message here
 * names the variable or the file and its line, never a value. */
#include <ctype.h>  /* isspace */
#include <stdint.h> /* UINT64_MAX */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* free, getenv */
#include <string.h> /* memset, strchr, strcmp, strlen, strncmp */
#include <time.h>   /* time: web identity's default session name */

#include "cache/remote/s3.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/params.h"

#define SHARED_FILE_MAX (1024 * 1024) /* a credentials or config file; more is refused */

/* ---- the URL ---- */

/* Describes the first character of s outside allowed() ("' ' at 5", "byte
 * 0xc3 at 2"), or "" when there is none. */
static void first_bad(const char *s, int (*allowed)(int), char *out, size_t cap) {
  out[0] = '\0';
  for (size_t i = 0; s[i]; i++) {
    unsigned char c = (unsigned char)s[i];
    if (allowed(c)) continue;
    if (c > 0x20 && c < 0x7f)
      snprintf(out, cap, "'%c' at %zu", c, i + 1);
    else if (c == ' ')
      snprintf(out, cap, "a space at %zu", i + 1);
    else
      snprintf(out, cap, "byte 0x%02x at %zu", c, i + 1);
    return;
  }
}

static int bucket_char(int c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

static int prefix_char(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '/' || c == '-';
}

/* 1 when s is printable ASCII, fit to quote in a message. */
static int quotable(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f || *s == '\'') return 0;
  return 1;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

kiln_status kiln_s3_check_bucket(const char *b) {
  size_t n = strlen(b);
  int dots = 0, digits_and_dots = 1;
  char bad[64];
  const char *q = quotable(b) ? b : "(not printable)";
  if (n == 0) return kiln_fail(KILN_EINVAL, "the S3 URL has no bucket: s3://BUCKET[/PREFIX]");
  first_bad(b, bucket_char, bad, sizeof bad);
  if (bad[0])
    return kiln_fail(KILN_EINVAL,
                     "S3 bucket name '%.80s': %s; a bucket name has only a-z 0-9 . - "
                     "(S3's naming rules)",
                     q, bad);
  if (n < 3 || n > 63)
    return kiln_fail(KILN_EINVAL, "S3 bucket name '%.80s' has %zu characters, not 3 to 63", q, n);
  if (!isalnum((unsigned char)b[0]) || !isalnum((unsigned char)b[n - 1]))
    return kiln_fail(KILN_EINVAL, "S3 bucket name '%s' must begin and end with a letter or a digit",
                     b);
  if (strstr(b, "..") || strstr(b, ".-") || strstr(b, "-."))
    return kiln_fail(KILN_EINVAL, "S3 bucket name '%s' has '..', '.-' or '-.'", b);
  for (const char *p = b; *p; p++) {
    dots += *p == '.';
    digits_and_dots &= *p == '.' || (*p >= '0' && *p <= '9');
  }
  if (digits_and_dots && dots == 3)
    return kiln_fail(KILN_EINVAL, "S3 bucket name '%s' is an IP address", b);
  if (strncmp(b, "xn--", 4) == 0 || strncmp(b, "sthree-", 7) == 0 || ends_with(b, "-s3alias") ||
      ends_with(b, "--ol-s3"))
    return kiln_fail(KILN_EINVAL, "S3 bucket name '%s' uses a prefix or suffix S3 reserves", b);
  return KILN_OK;
}

kiln_status kiln_s3_check_prefix(const char *p) {
  char bad[64];
  size_t n = strlen(p);
  if (n >= KILN_S3_PREFIX_MAX)
    return kiln_fail(KILN_EINVAL, "the S3 prefix is %zu characters, over the %d allowed", n,
                     KILN_S3_PREFIX_MAX - 1);
  first_bad(p, prefix_char, bad, sizeof bad);
  if (bad[0])
    return kiln_fail(KILN_EINVAL,
                     "the S3 prefix '%.200s': %s; a prefix has only A-Z a-z 0-9 . _ / - (kiln "
                     "signs the path as written, so nothing in it may need encoding)",
                     quotable(p) ? p : "(not printable)", bad);
  for (const char *s = p; n && s <= p + n;) {
    const char *e = strchr(s, '/');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
      return kiln_fail(KILN_EINVAL,
                       "the S3 prefix '%.200s' has an empty, '.' or '..' segment (write it as "
                       "a/b/c)",
                       p);
    s += len + 1;
  }
  return KILN_OK;
}

kiln_status kiln_s3_parse_url(const char *url, char *bucket, size_t bucket_cap, char *prefix,
                              size_t prefix_cap) {
  const char *b, *slash;
  size_t blen, plen;
  if (strncmp(url, "s3://", 5) != 0)
    return kiln_fail(KILN_EINVAL, "an S3 remote URL is s3://BUCKET[/PREFIX]");
  b = url + 5;
  slash = strchr(b, '/');
  blen = slash ? (size_t)(slash - b) : strlen(b);
  if (memchr(b, '@', blen) || memchr(b, ':', blen)) /* not echoed: it may hold a key */
    return kiln_fail(KILN_EINVAL, "the S3 URL has credentials or a port in it: it is "
                                  "s3://BUCKET[/PREFIX]; credentials come from AWS_* or "
                                  "~/.aws/credentials, the endpoint from KILN_S3_ENDPOINT");
  if (blen >= bucket_cap || blen > 63) {
    char tmp[80];
    snprintf(tmp, sizeof tmp, "%.63s", b);
    return kiln_fail(KILN_EINVAL, "S3 bucket name '%s...' is longer than 63 characters",
                     quotable(tmp) ? tmp : "(not printable)");
  }
  memcpy(bucket, b, blen);
  bucket[blen] = '\0';
  prefix[0] = '\0';
  if (kiln_s3_check_bucket(bucket) != KILN_OK) return KILN_EINVAL;
  if (!slash) return KILN_OK;
  plen = strlen(slash + 1);
  if (plen && slash[plen] == '/') plen--; /* one trailing '/' */
  if (plen >= prefix_cap || plen >= KILN_S3_PREFIX_MAX)
    return kiln_fail(KILN_EINVAL, "the S3 prefix is longer than %d characters",
                     KILN_S3_PREFIX_MAX - 1);
  memcpy(prefix, slash + 1, plen);
  prefix[plen] = '\0';
  return kiln_s3_check_prefix(prefix);
}

/* ---- the shared files (~/.aws/credentials, ~/.aws/config) ---- */

/* What one file says about one profile. */
typedef struct profile_vals {
  int found; /* the profile's section is in the file */
  char access_key[128], secret_key[128], session_token[4096], region[64];
  char token_file[1024], role_arn[256], session_name[65]; /* web identity (config file) */
  char unsupported[32]; /* the first key naming a way of getting credentials kiln lacks */
  int line_ak, line_sk;
} profile_vals;

static void wipe_vals(profile_vals *v) {
  volatile char *p = (volatile char *)v;
  for (size_t i = 0; i < sizeof *v; i++)
    p[i] = 0;
}

/* Trims s[0..*n) of spaces at both ends, in place; returns the new start. */
static char *trim(char *s, size_t *n) {
  while (*n && isspace((unsigned char)*s))
    s++, (*n)--;
  while (*n && isspace((unsigned char)s[*n - 1]))
    (*n)--;
  s[*n] = '\0';
  return s;
}

/* Copies a value into dst (cap bytes), checked: printable ASCII with no
 * spaces, shorter than cap. The message names key, file and line, never the
 * value. */
static kiln_status take_value(char *dst, size_t cap, const char *val, size_t n, const char *key,
                              const char *path, int line) {
  if (n >= cap)
    return kiln_fail(KILN_EINVAL, "%s line %d: %s is longer than %zu characters", path, line, key,
                     cap - 1);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)val[i] <= 0x20 || (unsigned char)val[i] >= 0x7f)
      return kiln_fail(KILN_EINVAL, "%s line %d: %s has a space or a character that is not ASCII",
                       path, line, key);
  memcpy(dst, val, n);
  dst[n] = '\0';
  return KILN_OK;
}

/* 1 when the section header's name [name] is profile's: in the credentials
 * file "[NAME]", in the config file "[profile NAME]" (and "[default]"). */
static int section_is(const char *name, const char *profile, int config) {
  if (!config) return strcmp(name, profile) == 0;
  if (strcmp(profile, "default") == 0 && strcmp(name, "default") == 0) return 1;
  if (strncmp(name, "profile", 7) != 0 || !isspace((unsigned char)name[7])) return 0;
  name += 7;
  while (isspace((unsigned char)*name))
    name++;
  return strcmp(name, profile) == 0;
}

/* The profile's keys in the INI file at path. KILN_ENOTFOUND when there is
 * no file; KILN_EIO when it cannot be read. Lines that begin with a space
 * continue a key's value (botocore's nested sections): skipped. */
static kiln_status read_profile(profile_vals *v, const char *path, const char *profile,
                                int config) {
  static const char *const unsupported[] = {"credential_process", "sso_session",
                                            "sso_start_url",      "sso_account_id",
                                            "source_profile",     "credential_source"};
  uint8_t *data = NULL;
  size_t len = 0;
  int in = 0, line = 0;
  kiln_status rc = kiln_read_regular(path, UINT64_MAX, SHARED_FILE_MAX, 0, &data, &len);
  if (rc == KILN_ENOTFOUND) return rc;
  if (rc != KILN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    return kiln_fail(KILN_EIO, "AWS shared file %s cannot be read: %s", path, why);
  }
  for (char *s = (char *)data, *end = (char *)data + len; s < end;) {
    char *nl = memchr(s, '\n', (size_t)(end - s)), *eq;
    size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
    char *next = s + n + 1, *l;
    int indented = n && (s[0] == ' ' || s[0] == '\t');
    line++;
    l = trim(s, &n);
    s = next;
    if (!n || l[0] == '#' || l[0] == ';' || indented) continue;
    if (l[0] == '[') {
      size_t m = n >= 2 && l[n - 1] == ']' ? n - 2 : 0;
      char *name = trim(l + 1, &m);
      in = section_is(name, profile, config);
      v->found |= in;
      continue;
    }
    if (!in || !(eq = strchr(l, '='))) continue;
    {
      size_t kn = (size_t)(eq - l), vn = n - kn - 1;
      char *key = trim(l, &kn), *val = trim(eq + 1, &vn);
      if (strcmp(key, "aws_access_key_id") == 0) {
        rc = take_value(v->access_key, sizeof v->access_key, val, vn, key, path, line);
        v->line_ak = line;
      } else if (strcmp(key, "aws_secret_access_key") == 0) {
        rc = take_value(v->secret_key, sizeof v->secret_key, val, vn, key, path, line);
        v->line_sk = line;
      } else if (strcmp(key, "aws_session_token") == 0) {
        rc = take_value(v->session_token, sizeof v->session_token, val, vn, key, path, line);
      } else if (strcmp(key, "region") == 0 && config) {
        rc = take_value(v->region, sizeof v->region, val, vn, key, path, line);
      } else if (strcmp(key, "web_identity_token_file") == 0 && config) {
        rc = take_value(v->token_file, sizeof v->token_file, val, vn, key, path, line);
      } else if (strcmp(key, "role_arn") == 0 && config) {
        rc = take_value(v->role_arn, sizeof v->role_arn, val, vn, key, path, line);
      } else if (strcmp(key, "role_session_name") == 0 && config) {
        rc = take_value(v->session_name, sizeof v->session_name, val, vn, key, path, line);
      } else {
        for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
          if (!v->unsupported[0] && strcmp(key, unsupported[i]) == 0)
            snprintf(v->unsupported, sizeof v->unsupported, "%s", unsupported[i]);
      }
      if (rc != KILN_OK) break;
    }
  }
  memset(data, 0, len);
  free(data);
  return rc;
}

/* The shared file's path: the variable, else ~/.aws/NAME; "" with neither. */
static void shared_path(char *out, size_t cap, const char *var, const char *name) {
  const char *home = getenv("HOME");
  if (var)
    snprintf(out, cap, "%s", var);
  else if (home && *home)
    snprintf(out, cap, "%s/.aws/%s", home, name);
  else
    out[0] = '\0';
}

/* A pair from the environment or a file, checked. */
static kiln_status take_env(char *dst, size_t cap, const char *val, const char *var) {
  size_t n = strlen(val);
  if (n >= cap) return kiln_fail(KILN_EINVAL, "%s is longer than %zu characters", var, cap - 1);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)val[i] <= 0x20 || (unsigned char)val[i] >= 0x7f)
      return kiln_fail(KILN_EINVAL, "%s has a space or a character that is not ASCII", var);
  memcpy(dst, val, n + 1);
  return KILN_OK;
}

/* Credentials from one file's profile, if it has them. */
static kiln_status from_file(kiln_s3_creds *out, profile_vals *v, const char *path,
                             const char *profile, int *got) {
  *got = 0;
  if (!v->access_key[0] && !v->secret_key[0]) return KILN_OK;
  if (!v->access_key[0] || !v->secret_key[0])
    return kiln_fail(KILN_EINVAL, "%s, profile %s: %s without %s", path, profile,
                     v->access_key[0] ? "aws_access_key_id" : "aws_secret_access_key",
                     v->access_key[0] ? "aws_secret_access_key" : "aws_access_key_id");
  memcpy(out->access_key, v->access_key, sizeof out->access_key);
  memcpy(out->secret_key, v->secret_key, sizeof out->secret_key);
  memcpy(out->session_token, v->session_token, sizeof out->session_token);
  snprintf(out->source, sizeof out->source, "file %.500s, profile %.100s", path, profile);
  *got = 1;
  return KILN_OK;
}

static int session_char(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         strchr("_+=,.@-", c) != NULL;
}

/* Web identity from the environment (AWS_WEB_IDENTITY_TOKEN_FILE +
 * AWS_ROLE_ARN), else from the config file's profile (v); *got = 1 when
 * either has it. The token is not read here: kiln_sts_web_identity does. */
static kiln_status web_identity(kiln_s3_creds *out, const profile_vals *v, const char *conf_path,
                                const char *profile, int *got) {
  const char *file = kiln_param_aws_web_identity_token_file(), *arn = kiln_param_aws_role_arn();
  const char *name = kiln_param_aws_role_session_name(), *from = "AWS_WEB_IDENTITY_TOKEN_FILE";
  char where[700], bad[64];
  kiln_status rc = KILN_OK;
  *got = 0;
  if (file || arn) {
    if (!file || !arn)
      return kiln_fail(KILN_EINVAL, "%s is set but %s is not: web identity needs both",
                       file ? "AWS_WEB_IDENTITY_TOKEN_FILE" : "AWS_ROLE_ARN",
                       file ? "AWS_ROLE_ARN" : "AWS_WEB_IDENTITY_TOKEN_FILE");
    snprintf(where, sizeof where, "AWS_ROLE_ARN");
  } else if (v->token_file[0]) {
    if (!v->role_arn[0])
      return kiln_fail(KILN_EINVAL, "%s, profile %s: web_identity_token_file without role_arn",
                       conf_path, profile);
    file = v->token_file;
    arn = v->role_arn;
    if (!name && v->session_name[0]) name = v->session_name;
    from = "web_identity_token_file";
    snprintf(where, sizeof where, "%.500s, profile %.100s", conf_path, profile);
  } else {
    return KILN_OK;
  }
  KILN_CHECK(take_env(out->token_file, sizeof out->token_file, file, from));
  KILN_CHECK(take_env(out->role_arn, sizeof out->role_arn, arn, "the role ARN"));
  if (strncmp(out->role_arn, "arn:", 4) != 0) {
    rc = kiln_fail(KILN_EINVAL,
                   "the role ARN from %s does not begin with arn: (arn:aws:iam::"
                   "ACCOUNT:role/NAME)",
                   where);
    goto out;
  }
  if (name) {
    first_bad(name, session_char, bad, sizeof bad);
    if (bad[0] || strlen(name) < 2 || strlen(name) > 64) {
      rc = kiln_fail(KILN_EINVAL,
                     "the role session name (AWS_ROLE_SESSION_NAME or role_session_name) must be "
                     "2 to 64 of A-Z a-z 0-9 _ + = , . @ -%s%s",
                     bad[0] ? ": " : "", bad);
      goto out;
    }
    snprintf(out->session_name, sizeof out->session_name, "%s", name);
  } else {
    snprintf(out->session_name, sizeof out->session_name, "kiln-%lld", (long long)time(NULL));
  }
  out->web_identity = 1;
  snprintf(out->source, sizeof out->source,
           "web identity (role %.200s from %.200s, token file %.200s)", out->role_arn, where,
           out->token_file);
  *got = 1;
out:
  return rc;
}

kiln_status kiln_s3_load_creds(kiln_s3_creds *out, char *region, size_t region_cap) {
  const char *ak = kiln_param_aws_access_key_id(), *sk = kiln_param_aws_secret_access_key();
  const char *tok = kiln_param_aws_session_token(), *prof_var = kiln_param_aws_profile();
  const char *profile = prof_var ? prof_var : "default";
  char cred_path[1024], conf_path[1024];
  profile_vals *cv = calloc(1, sizeof *cv), *fv = calloc(1, sizeof *fv);
  kiln_status rc = KILN_OK, crc, frc;
  int got = 0;
  memset(out, 0, sizeof *out);
  if (region && region_cap) region[0] = '\0';
  if (!cv || !fv) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  shared_path(cred_path, sizeof cred_path, kiln_param_aws_shared_credentials_file(), "credentials");
  shared_path(conf_path, sizeof conf_path, kiln_param_aws_config_file(), "config");
  /* the config file is read whatever the credentials' source: it has the region */
  frc = conf_path[0] ? read_profile(fv, conf_path, profile, 1) : KILN_ENOTFOUND;
  if (frc != KILN_OK && frc != KILN_ENOTFOUND) {
    rc = frc;
    goto out;
  }
  if (region && region_cap) snprintf(region, region_cap, "%s", fv->region);
  if (ak || sk) {
    if (!ak || !sk) {
      rc = kiln_fail(KILN_EINVAL, "%s is set but %s is not: set both, or neither",
                     ak ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                     ak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
      goto out;
    }
    KILN_CHECK(take_env(out->access_key, sizeof out->access_key, ak, "AWS_ACCESS_KEY_ID"));
    KILN_CHECK(take_env(out->secret_key, sizeof out->secret_key, sk, "AWS_SECRET_ACCESS_KEY"));
    if (tok)
      KILN_CHECK(take_env(out->session_token, sizeof out->session_token, tok, "AWS_SESSION_TOKEN"));
    snprintf(out->source, sizeof out->source, "environment (AWS_ACCESS_KEY_ID%s)",
             tok ? ", AWS_SESSION_TOKEN" : "");
    goto out;
  }
  crc = cred_path[0] ? read_profile(cv, cred_path, profile, 0) : KILN_ENOTFOUND;
  if (crc != KILN_OK && crc != KILN_ENOTFOUND) {
    rc = crc;
    goto out;
  }
  KILN_CHECK(from_file(out, cv, cred_path, profile, &got));
  if (!got) KILN_CHECK(from_file(out, fv, conf_path, profile, &got));
  if (!got) KILN_CHECK(web_identity(out, fv, conf_path, profile, &got));
  if (got) goto out;
  if (fv->role_arn[0]) /* a role assumed from another profile's credentials */
    snprintf(fv->unsupported, sizeof fv->unsupported, "role_arn");
  if (cv->unsupported[0] || fv->unsupported[0]) {
    rc = kiln_fail(KILN_EINVAL,
                   "AWS profile %s gets its credentials through %s, which kiln does not "
                   "support yet: export AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and "
                   "AWS_SESSION_TOKEN (e.g. `aws configure export-credentials --format env`)",
                   profile, cv->unsupported[0] ? cv->unsupported : fv->unsupported);
    goto out;
  }
  if (prof_var && !cv->found && !fv->found) {
    rc = kiln_fail(KILN_EINVAL, "AWS_PROFILE=%s: no such profile in %s or %s", profile,
                   cred_path[0] ? cred_path : "(no credentials file)",
                   conf_path[0] ? conf_path : "(no config file)");
    goto out;
  }
  out->anonymous = 1;
  snprintf(out->source, sizeof out->source, "anonymous (no credentials found)");
out:
  if (cv) wipe_vals(cv);
  if (fv) wipe_vals(fv);
  free(cv);
  free(fv);
  if (rc != KILN_OK) memset(out, 0, sizeof *out);
  return rc;
}

/* ---- region, endpoint, addressing, base ---- */

static int region_char(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

static int path_char(int c) {
  return prefix_char(c);
}

/* scheme://host[:port][/path] with no credentials, query or fragment; one
 * trailing '/' dropped. *host_at and *host_len locate the authority. */
static kiln_status check_endpoint(char *out, size_t cap, const char *v, const char *from,
                                  size_t *auth_at, size_t *auth_len) {
  size_t n = strlen(v), skip;
  const char *a, *end;
  char bad[64];
  if (strncmp(v, "https://", 8) == 0)
    skip = 8;
  else if (strncmp(v, "http://", 7) == 0)
    skip = 7;
  else
    return kiln_fail(KILN_EINVAL, "%s must start with http:// or https://", from);
  a = v + skip;
  end = a + strcspn(a, "/");
  if (memchr(a, '@', (size_t)(end - a)))
    return kiln_fail(KILN_EINVAL,
                     "%s has credentials in it: credentials come from AWS_* or "
                     "~/.aws/credentials",
                     from);
  if (end == a) return kiln_fail(KILN_EINVAL, "%s has no host", from);
  while (n > skip && v[n - 1] == '/')
    n--;
  if (n >= cap) return kiln_fail(KILN_EINVAL, "%s is longer than %zu characters", from, cap - 1);
  for (const char *p = a; p < end; p++)
    if (!(isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == ':' || *p == '[' ||
          *p == ']'))
      return kiln_fail(KILN_EINVAL, "%s: its host has '%c', which a host name does not", from,
                       *p > 0x20 && *p < 0x7f ? *p : '?');
  memcpy(out, v, n);
  out[n] = '\0';
  first_bad(out + (end - v), path_char, bad, sizeof bad);
  if (bad[0])
    return kiln_fail(KILN_EINVAL, "%s: its path has %s (only A-Z a-z 0-9 . _ / -)", from, bad);
  *auth_at = skip;
  *auth_len = (size_t)(end - a);
  return KILN_OK;
}

kiln_status kiln_s3_config_load(kiln_s3_config *c, const char *url) {
  const char *v, *addressing = kiln_param_s3_addressing();
  char profile_region[64], bad[64];
  size_t auth_at = 0, auth_len = 0;
  int n;
  kiln_status rc = KILN_OK;
  memset(c, 0, sizeof *c);
  KILN_CHECK(kiln_s3_parse_url(url, c->bucket, sizeof c->bucket, c->prefix, sizeof c->prefix));
  KILN_CHECK(kiln_s3_load_creds(&c->creds, profile_region, sizeof profile_region));
  /* region */
  if ((v = kiln_param_aws_region()))
    snprintf(c->region_from, sizeof c->region_from, "AWS_REGION");
  else if ((v = kiln_param_aws_default_region()))
    snprintf(c->region_from, sizeof c->region_from, "AWS_DEFAULT_REGION");
  else if (profile_region[0]) {
    v = profile_region;
    snprintf(c->region_from, sizeof c->region_from, "the AWS config file's profile");
  } else {
    v = "us-east-1";
    snprintf(c->region_from, sizeof c->region_from, "the default");
  }
  first_bad(v, region_char, bad, sizeof bad);
  if (bad[0] || strlen(v) >= 48) {
    rc = kiln_fail(KILN_EINVAL, "the AWS region from %s is not a region name (%s)", c->region_from,
                   bad[0] ? bad : "too long");
    goto out;
  }
  snprintf(c->region, sizeof c->region, "%s", v);
  snprintf(c->sigv4, sizeof c->sigv4, "aws:amz:%s:s3", c->region);
  /* addressing */
  if (!addressing || strcmp(addressing, "path") == 0)
    c->virtual_host = 0;
  else if (strcmp(addressing, "virtual") == 0)
    c->virtual_host = 1;
  else {
    rc = kiln_fail(KILN_EINVAL, "KILN_S3_ADDRESSING: '%.40s' is not path or virtual",
                   quotable(addressing) ? addressing : "(not printable)");
    goto out;
  }
  /* endpoint */
  if ((v = kiln_param_s3_endpoint()))
    snprintf(c->endpoint_from, sizeof c->endpoint_from, "KILN_S3_ENDPOINT");
  else if ((v = kiln_param_aws_endpoint_url_s3()))
    snprintf(c->endpoint_from, sizeof c->endpoint_from, "AWS_ENDPOINT_URL_S3");
  else if ((v = kiln_param_aws_endpoint_url()))
    snprintf(c->endpoint_from, sizeof c->endpoint_from, "AWS_ENDPOINT_URL");
  if (v) {
    KILN_CHECK(
        check_endpoint(c->endpoint, sizeof c->endpoint, v, c->endpoint_from, &auth_at, &auth_len));
  } else {
    snprintf(c->endpoint_from, sizeof c->endpoint_from, "AWS, for the region");
    n = snprintf(c->endpoint, sizeof c->endpoint, "https://s3.%s.amazonaws.com", c->region);
    auth_at = 8;
    auth_len = (size_t)n - 8;
  }
  /* web identity's STS */
  if ((v = kiln_param_aws_endpoint_url_sts()))
    snprintf(c->sts_from, sizeof c->sts_from, "AWS_ENDPOINT_URL_STS");
  else if ((v = kiln_param_aws_endpoint_url()))
    snprintf(c->sts_from, sizeof c->sts_from, "AWS_ENDPOINT_URL");
  if (v) {
    size_t at, alen;
    KILN_CHECK(check_endpoint(c->sts_endpoint, sizeof c->sts_endpoint, v, c->sts_from, &at, &alen));
  } else {
    snprintf(c->sts_from, sizeof c->sts_from, "AWS, for the region");
    snprintf(c->sts_endpoint, sizeof c->sts_endpoint, "https://sts.%s.amazonaws.com", c->region);
  }
  /* base */
  if (c->virtual_host) {
    const char *host = c->endpoint + auth_at;
    if (host[0] == '[' || strspn(host, "0123456789.:") >= auth_len) {
      rc = kiln_fail(KILN_EINVAL,
                     "KILN_S3_ADDRESSING=virtual needs an endpoint with a host name (the bucket "
                     "becomes part of it), not an IP address: use path");
      goto out;
    }
    n = snprintf(c->base, sizeof c->base, "%.*s%s.%s%s%s", (int)auth_at, c->endpoint, c->bucket,
                 host, c->prefix[0] ? "/" : "", c->prefix);
  } else {
    n = snprintf(c->base, sizeof c->base, "%s/%s%s%s", c->endpoint, c->bucket,
                 c->prefix[0] ? "/" : "", c->prefix);
  }
  if (n < 0 || (size_t)n >= sizeof c->base) {
    rc = kiln_fail(KILN_EINVAL, "the S3 endpoint, bucket and prefix make a URL that is too long");
    goto out;
  }
out:
  if (rc != KILN_OK) kiln_s3_config_wipe(c);
  return rc;
}

void kiln_s3_config_wipe(kiln_s3_config *c) {
  volatile char *p = (volatile char *)&c->creds;
  for (size_t i = 0; i < sizeof c->creds; i++)
    p[i] = 0;
}
