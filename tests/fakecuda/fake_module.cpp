/* fake_module.cpp — images, modules, functions and launches.
 *
 * An image is validated as the driver does it (README.md, "Images"): a CUBIN
 * (ELF, EM_CUDA) for the device's SM major with a minor no newer, or PTX
 * text whose ISA the driver version knows and whose target the device can
 * run. A function is found when its name is in the image *and* the fake can
 * run it (fake_kernels.h): the kernel that runs is the fake's own host build
 * of the unit's source, not the image's code. A launch checks the shape, the
 * arguments and every buffer against the entry's contract, then runs the
 * kernel on the fiber emulator, synchronously. */
#include <elf.h>     /* Elf64_Ehdr, Elf64_Shdr, Elf64_Phdr */
#include <fnmatch.h> /* fnmatch */
#include <limits.h>  /* INT_MAX */
#include <math.h>    /* isnan */
#include <stdarg.h>  /* va_list */
#include <stdio.h>   /* snprintf, sscanf */
#include <string.h>  /* memcmp, memcpy, strchr, strlen, strstr */
#include <unistd.h>  /* getpid */

#include <openssl/evp.h> /* EVP_Digest: the log's sha256= */

#include <algorithm>  /* std::max, std::min */
#include <functional> /* std::function */
#include <map>        /* std::map */
#include <string>     /* std::string */
#include <vector>     /* std::vector */

#include "fake.h"
#include "fake_kernels.h" /* find_entry, launch_plan */
#include "ptx_host.h"     /* f16/bf16 conversions (tests/emu) */
#include "runtime.h"      /* kiln_emu::launch (tests/emu) */

namespace kiln_fake {
namespace {

const int kEmCuda = 190;             /* EM_CUDA */
const size_t kMaxImage = 1ull << 30; /* larger is a corrupt header */

struct image {
  bool cubin;
  int sm;                           /* cubin: sm_XY; PTX: the .target's XY */
  int isa = 0;                      /* PTX: .version A.B as A*10+B */
  size_t bytes;                     /* cubin: the ELF's extent; PTX: strlen */
  std::vector<std::string> entries; /* PTX: the .entry names */
};

struct module {
  const context *ctx;
  image info;
  std::vector<char> bytes; /* the copy, as the driver keeps one */
  std::map<std::string, uintptr_t> functions;
};

struct function {
  uintptr_t module;
  const context *ctx;
  const entry *e;
};

std::map<uintptr_t, module> g_modules;
std::map<uintptr_t, function> g_functions;
unsigned long long g_launches; /* seeds the emulator's scheduling: reproducible per process */

CUresult fail_why(std::string *why, CUresult r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
CUresult fail_why(std::string *why, CUresult r, const char *fmt, ...) {
  char buf[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  *why = buf;
  return r;
}

/* ---- images ------------------------------------------------------------------ */

/* The ELF's extent from its headers (the driver has no other length) and its
 * SM architecture from e_flags: CUDA 13's ABI (EI_ABIVERSION >= 8) keeps it in
 * bits 8-15, older ones in bits 0-7. */
CUresult inspect_elf(const unsigned char *b, image *out, std::string *why) {
  Elf64_Ehdr h;
  memcpy(&h, b, sizeof h);
  if (h.e_ident[EI_CLASS] != ELFCLASS64 || h.e_ident[EI_DATA] != ELFDATA2LSB)
    return fail_why(why, CUDA_ERROR_INVALID_IMAGE, "not a 64-bit little-endian ELF");
  if (h.e_machine != kEmCuda)
    return fail_why(why, CUDA_ERROR_INVALID_IMAGE, "ELF for machine %d, not EM_CUDA (190)",
                    h.e_machine);
  size_t end = sizeof h;
  if (h.e_phnum && (h.e_phentsize != sizeof(Elf64_Phdr) || h.e_phoff > kMaxImage))
    return fail_why(why, CUDA_ERROR_INVALID_IMAGE, "bad program header table");
  if (h.e_shnum && (h.e_shentsize != sizeof(Elf64_Shdr) || h.e_shoff > kMaxImage))
    return fail_why(why, CUDA_ERROR_INVALID_IMAGE, "bad section header table");
  for (unsigned i = 0; i < h.e_phnum; ++i) {
    Elf64_Phdr ph;
    memcpy(&ph, b + h.e_phoff + i * sizeof ph, sizeof ph);
    if (ph.p_offset > kMaxImage || ph.p_filesz > kMaxImage)
      return fail_why(why, CUDA_ERROR_INVALID_IMAGE, "program header %u out of range", i);
    end = std::max(end, (size_t)(h.e_phoff + (i + 1) * sizeof ph));
    end = std::max(end, (size_t)(ph.p_offset + ph.p_filesz));
  }
  for (unsigned i = 0; i < h.e_shnum; ++i) {
    Elf64_Shdr sh;
    memcpy(&sh, b + h.e_shoff + i * sizeof sh, sizeof sh);
    if (sh.sh_type != SHT_NOBITS && (sh.sh_offset > kMaxImage || sh.sh_size > kMaxImage))
      return fail_why(why, CUDA_ERROR_INVALID_IMAGE, "section %u out of range", i);
    end = std::max(end, (size_t)(h.e_shoff + (i + 1) * sizeof sh));
    if (sh.sh_type != SHT_NOBITS) end = std::max(end, (size_t)(sh.sh_offset + sh.sh_size));
  }
  const unsigned sm = h.e_ident[EI_ABIVERSION] >= 8 ? (h.e_flags >> 8) & 0xff : h.e_flags & 0xff;
  if (sm < 10)
    return fail_why(why, CUDA_ERROR_INVALID_IMAGE, "no SM architecture in e_flags 0x%x",
                    (unsigned)h.e_flags);
  out->cubin = true;
  out->sm = (int)sm;
  out->bytes = end;
  return CUDA_SUCCESS;
}

/* PTX tokens: words ([A-Za-z0-9_.$%]+) and single punctuation; comments and
 * white space skipped. */
struct lexer {
  const char *p;
  std::string next() {
    for (;;) {
      while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v')
        ++p;
      if (p[0] == '/' && p[1] == '/') {
        while (*p && *p != '\n')
          ++p;
      } else if (p[0] == '/' && p[1] == '*') {
        const char *e = strstr(p + 2, "*/");
        p = e ? e + 2 : p + strlen(p);
      } else {
        break;
      }
    }
    const char *s = p;
    auto word = [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '.' || c == '$' || c == '%';
    };
    while (word(*p))
      ++p;
    if (p == s && *p) ++p;
    return std::string(s, (size_t)(p - s));
  }
};

CUresult inspect_ptx(const char *text, image *out, std::string *why) {
  const size_t n = strlen(text);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = (unsigned char)text[i];
    if ((c < 0x20 && !strchr("\t\n\r\f\v", c)) || c > 0x7e)
      return fail_why(why, CUDA_ERROR_INVALID_IMAGE,
                      "neither a cubin (ELF) nor PTX text: byte 0x%02x at offset %zu", c, i);
  }
  out->cubin = false;
  out->bytes = n;
  out->sm = out->isa = -1;
  lexer lx{text};
  for (std::string t = lx.next(); !t.empty(); t = lx.next()) {
    if (t == ".version" && out->isa < 0) {
      const std::string v = lx.next();
      unsigned a = 0, b = 0;
      char tail;
      if (sscanf(v.c_str(), "%u.%u%c", &a, &b, &tail) != 2 || b > 9 || a > 99)
        return fail_why(why, CUDA_ERROR_INVALID_PTX, "malformed .version %s", v.c_str());
      out->isa = (int)(a * 10 + b);
    } else if (t == ".target" && out->sm < 0) {
      if (out->isa < 0) return fail_why(why, CUDA_ERROR_INVALID_PTX, ".target before .version");
      const std::string v = lx.next();
      unsigned sm = 0;
      if (sscanf(v.c_str(), "sm_%u", &sm) != 1 || sm < 10 || sm > 999)
        return fail_why(why, CUDA_ERROR_INVALID_PTX, "malformed .target %s", v.c_str());
      out->sm = (int)sm;
    } else if (t == ".entry") {
      out->entries.push_back(lx.next());
    }
  }
  if (out->isa < 0 || out->sm < 0)
    return fail_why(why, CUDA_ERROR_INVALID_IMAGE, "neither a cubin (ELF) nor PTX: no %s directive",
                    out->isa < 0 ? ".version" : ".target");
  return CUDA_SUCCESS;
}

/* Classifies and checks an image against the device and driver. */
CUresult inspect(const void *data, const device &dev, image *out, std::string *why) {
  const unsigned char *b = (const unsigned char *)data;
  CUresult r;
  /* Byte by byte: a short text image ends (NUL) before the magic could. */
  if (b[0] == ELFMAG0 && b[1] == ELFMAG1 && b[2] == ELFMAG2 && b[3] == ELFMAG3)
    r = inspect_elf(b, out, why);
  else
    r = inspect_ptx((const char *)data, out, why);
  if (r) return r;
  const int rej = cfg().reject;
  if (rej == kRejectAll || (rej == kRejectCubin && out->cubin) ||
      (rej == kRejectPtx && !out->cubin))
    return fail_why(why, CUDA_ERROR_INVALID_IMAGE, "%s rejected by KILN_FAKE_CUDA_REJECT",
                    out->cubin ? "cubin" : "ptx");
  const int cc = dev.major * 10 + dev.minor;
  if (out->cubin) {
    /* A cubin runs on its own major only, on a minor at least its own. */
    if (out->sm / 10 != dev.major || out->sm % 10 > dev.minor)
      return fail_why(why, CUDA_ERROR_NO_BINARY_FOR_GPU, "cubin sm_%d on a device sm_%d", out->sm,
                      cc);
    return CUDA_SUCCESS;
  }
  if (out->isa > cfg().ptx_isa)
    return fail_why(why, CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                    "PTX ISA %d.%d is newer than driver %d's %d.%d", out->isa / 10, out->isa % 10,
                    cfg().driver, cfg().ptx_isa / 10, cfg().ptx_isa % 10);
  /* The real JIT says "Unsupported .target" with CUDA_ERROR_INVALID_PTX. */
  if (out->sm > cc)
    return fail_why(why, CUDA_ERROR_INVALID_PTX, "PTX .target sm_%d on a device sm_%d", out->sm,
                    cc);
  return CUDA_SUCCESS;
}

/* The SHA-256 of the bytes a load took, in hex (the log's sha256=: tests check
 * that every image the driver got is one a cache holds, unaltered). */
std::string sha256_hex(const std::vector<char> &bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  static const char hex[] = "0123456789abcdef";
  std::string out;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr) != 1) return "-";
  for (unsigned i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

/* JIT options: the log buffers are filled (their size options get the bytes
 * written, as the driver does), the rest accepted and ignored. */
CUresult read_options(unsigned n, CUjit_option *opts, void **values, char **err_buf,
                      size_t *err_size, int *err_index) {
  *err_buf = nullptr;
  *err_size = 0;
  *err_index = -1;
  if (n && (!opts || !values)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; ++i) {
    if ((unsigned)opts[i] >= (unsigned)CU_JIT_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
    if (opts[i] == CU_JIT_ERROR_LOG_BUFFER) *err_buf = (char *)values[i];
    if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      *err_size = (size_t)(uintptr_t)values[i];
      *err_index = (int)i;
    }
  }
  return CUDA_SUCCESS;
}

} // namespace

void modules_drop_context(const context *c) {
  for (auto it = g_functions.begin(); it != g_functions.end();)
    it = it->second.ctx == c ? g_functions.erase(it) : std::next(it);
  for (auto it = g_modules.begin(); it != g_modules.end();)
    it = it->second.ctx == c ? g_modules.erase(it) : std::next(it);
}

CUresult fake_ModuleLoadDataEx(CUmodule *m, const void *data, unsigned int n, CUjit_option *opts,
                               void **values) {
  if (!m || !data) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  if (capture_status() != CU_STREAM_CAPTURE_STATUS_NONE) {
    /* a load is not a stream operation: the driver refuses it during a
     * global-mode capture, and the capture is invalidated */
    capture_invalidate();
    log_line("load fail %s a stream is capturing a CUDA graph",
             error_name(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED));
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  char *err_buf;
  size_t err_size;
  int err_index;
  if (CUresult r = read_options(n, opts, values, &err_buf, &err_size, &err_index)) {
    log_line("load fail %s bad JIT options", error_name(r));
    return r;
  }
  image info;
  std::string why;
  if (CUresult r = inspect(data, cfg().devices[c->device], &info, &why)) {
    log_line("load fail %s %s", error_name(r), why.c_str());
    if (err_buf && err_size) {
      const int k = snprintf(err_buf, err_size, "kiln fakecuda: %s", why.c_str());
      values[err_index] = (void *)(uintptr_t)std::min((size_t)k, err_size - 1);
    }
    return r;
  }
  if (err_buf && err_size) {
    err_buf[0] = '\0';
    values[err_index] = (void *)(uintptr_t)0;
  }
  const uintptr_t h = next_handle();
  module &mod = g_modules[h];
  mod.ctx = c;
  mod.info = info;
  const char *b = (const char *)data;
  mod.bytes.assign(b, b + info.bytes);
  log_line("load ok %s %s_%d %zu pid=%d sha256=%s", info.cubin ? "cubin" : "ptx",
           info.cubin ? "sm" : "compute", info.sm, info.bytes, (int)getpid(),
           sha256_hex(mod.bytes).c_str());
  *m = (CUmodule)h;
  return CUDA_SUCCESS;
}

CUresult fake_ModuleUnload(CUmodule m) {
  std::lock_guard<std::mutex> g(lock());
  if (CUresult r = initialized()) return r;
  auto it = g_modules.find((uintptr_t)m);
  if (it == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (const auto &f : it->second.functions)
    g_functions.erase(f.second);
  g_modules.erase(it);
  return CUDA_SUCCESS;
}

namespace {

/* Is name a symbol of the image: an ELF string ("\0name\0", or a section
 * ".text.name\0"), a PTX .entry. */
bool image_has(const module &m, const std::string &name) {
  if (!m.info.cubin) {
    for (const std::string &e : m.info.entries)
      if (e == name) return true;
    return false;
  }
  const std::vector<char> &b = m.bytes;
  const size_t len = name.size() + 1; /* with its NUL */
  for (size_t i = 1; i + len <= b.size(); ++i)
    if ((b[i - 1] == '\0' || b[i - 1] == '.') && !memcmp(&b[i], name.c_str(), len)) return true;
  return false;
}

} // namespace

CUresult fake_ModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  if (!f || !name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  auto it = g_modules.find((uintptr_t)m);
  if (it == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  module &mod = it->second;
  auto have = mod.functions.find(name);
  if (have != mod.functions.end()) {
    *f = (CUfunction)have->second;
    return CUDA_SUCCESS;
  }
  if (!image_has(mod, name)) {
    log_line("function fail %s not in the image", name);
    return CUDA_ERROR_NOT_FOUND;
  }
  const entry *e = find_entry(name);
  if (!e) {
    log_line("function fail %s the fake cannot run it (tests/fakecuda/fake_kernels.h)", name);
    return CUDA_ERROR_NOT_FOUND;
  }
  const uintptr_t h = next_handle();
  g_functions[h] = function{it->first, mod.ctx, e};
  mod.functions[name] = h;
  *f = (CUfunction)h;
  return CUDA_SUCCESS;
}

/* ---- launches --------------------------------------------------------------------- */

namespace {

const char *const kDtypeNames[] = {"f32", "f16", "bf16"};

/* Buffers against the allocations of context c, and against each other. */
bool check_buffers(const launch_plan &pl, const context *c, std::string *why) {
  for (int i = 0; i < pl.nbuf; ++i) {
    const buffer_use &u = pl.buf[i];
    if (!u.bytes) continue;
    if (u.ptr % u.align) {
      fail_why(why, CUDA_ERROR_INVALID_VALUE, "%s=0x%llx is not aligned to its %u-byte elements",
               u.name, (unsigned long long)u.ptr, u.align);
      return false;
    }
    if (!memory_covers(u.ptr, u.bytes, c)) {
      fail_why(why, CUDA_ERROR_INVALID_VALUE,
               "%s=0x%llx (%llu bytes) is not inside one live cuMemAlloc allocation of this "
               "context",
               u.name, (unsigned long long)u.ptr, u.bytes);
      return false;
    }
  }
  for (int i = 0; i < pl.nbuf; ++i)
    for (int j = i + 1; j < pl.nbuf; ++j) {
      const buffer_use &a = pl.buf[i], &b = pl.buf[j];
      if (!a.bytes || !b.bytes || (!a.written && !b.written)) continue;
      if (a.ptr >= b.ptr + b.bytes || b.ptr >= a.ptr + a.bytes) continue;
      if (a.ptr == b.ptr && a.bytes == b.bytes && a.in_place_ok && b.in_place_ok) continue;
      fail_why(why, CUDA_ERROR_INVALID_VALUE, "%s and %s overlap without being the same buffer",
               a.name, b.name);
      return false;
    }
  return true;
}

/* KILN_FAKE_CUDA_WRONG: the first element of the output becomes -v - 1
 * (never equal to v, finite unless v was infinite). */
void perturb(const launch_plan &pl) {
  const buffer_use &u = pl.buf[pl.out];
  if (u.bytes == 0) return;
  void *p = (void *)u.ptr;
  float v;
  unsigned short h;
  if (pl.out_dtype == kF32)
    memcpy(&v, p, 4);
  else {
    memcpy(&h, p, 2);
    v = pl.out_dtype == kF16 ? kiln_emu::f16_bits_to_f32(h) : [&] {
      const uint32_t u32 = (uint32_t)h << 16;
      float f;
      memcpy(&f, &u32, 4);
      return f;
    }();
  }
  float w = isnan(v) ? 0.5f : -v - 1.f;
  if (w == v) w = v + 1.f; /* v = -0.5 */
  if (pl.out_dtype == kF32) {
    memcpy(p, &w, 4);
    return;
  }
  h = pl.out_dtype == kF16 ? kiln_emu::f32_to_f16_bits(w) : kiln_emu::f32_to_bf16_bits(w);
  memcpy(p, &h, 2);
}

} // namespace

/* KILN_FAKE_CUDA_RUN, read on every launch like KILN_FAKE_CUDA_CAPTURE, so a
 * benchmark can check results with it unset and then time the host's side
 * alone: "0" validates a launch (plan, buffers) and skips the emulated kernel. */
static bool run_kernels() {
  const char *v = getenv("KILN_FAKE_CUDA_RUN");
  return !v || strcmp(v, "0");
}

CUresult fake_LaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned shmem, CUstream, void **params,
                           void **extra) {
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) {
    log_line("launch fail - %s: no usable current context", error_name(r));
    return r;
  }
  if (capture_status() == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    log_line("launch fail - the stream's CUDA graph capture was invalidated");
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  auto it = g_functions.find((uintptr_t)f);
  if (it == g_functions.end() || it->second.ctx != c) {
    log_line("launch fail - %s", it == g_functions.end()
                                     ? "not a live CUfunction"
                                     : "a function of a module loaded in another context");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  const entry &e = *it->second.e;
  std::string why;
  launch_plan pl;
  if (gx == 0 || gx > INT_MAX || gy != 1 || gz != 1)
    fail_why(&why, CUDA_ERROR_INVALID_VALUE, "grid %ux%ux%u: want 1..2^31-1 x 1 x 1", gx, gy, gz);
  else if (bx != e.threads || by != 1 || bz != 1)
    fail_why(&why, CUDA_ERROR_INVALID_VALUE, "block %ux%ux%u: compiled for exactly %ux1x1", bx, by,
             bz, e.threads);
  else if (shmem)
    fail_why(&why, CUDA_ERROR_INVALID_VALUE, "sharedMemBytes %u: no dynamic shared memory", shmem);
  else if (extra)
    fail_why(&why, CUDA_ERROR_INVALID_VALUE, "extra is not NULL (pass kernelParams only)");
  else if (!params)
    fail_why(&why, CUDA_ERROR_INVALID_VALUE, "kernelParams is NULL");
  else if (e.plan(e, params, &pl, &why))
    check_buffers(pl, c, &why);
  if (!why.empty()) {
    log_line("launch fail %s %s", e.name, why.c_str());
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!run_kernels()) { /* KILN_FAKE_CUDA_RUN=0: validated, not run (host-cost benchmarks) */
    log_line("launch %s grid=%u block=%u (not run)", e.name, gx, bx);
    return CUDA_SUCCESS;
  }
  kiln_emu::launch_options opt;
  opt.grid = gx;
  opt.block = bx;
  opt.seed = ++g_launches;
  const std::function<void()> kernel = [&] { e.run(params); };
  std::string err;
  if (!kiln_emu::launch(opt, kernel, &err)) {
    c->sticky = CUDA_ERROR_LAUNCH_FAILED; /* as on a GPU: the context is unusable now */
    log_line("launch fail %s %s", e.name, err.c_str());
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  if (cfg().have_wrong && !fnmatch(cfg().wrong.c_str(), e.name, 0) && pl.out >= 0) {
    perturb(pl);
    log_line("wrong %s %s[0] (%s) perturbed", e.name, pl.buf[pl.out].name,
             kDtypeNames[pl.out_dtype]);
  }
  log_line("launch %s grid=%u block=%u", e.name, gx, bx);
  return CUDA_SUCCESS;
}

} // namespace kiln_fake
