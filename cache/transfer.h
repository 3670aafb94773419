/* Internal: what kiln_cache_export (cache/export.c) and kiln_cache_import
 * (cache/import.c) share: the archive's fixed names and its format version
 * (docs/cache-format.md, "Archives"). */
#ifndef KILN_CACHE_TRANSFER_H
#define KILN_CACHE_TRANSFER_H

#define KILN_ARCHIVE_FORMAT "kiln-cache-archive"
/* The version this kiln writes. import.c reads every version up to it (an
 * older one through its migration) and refuses a newer one. */
#define KILN_ARCHIVE_VERSION 1
#define KILN_ARCHIVE_MANIFEST "kiln-archive.json"
/* The last member: SHA-256 of every byte before its data except the blobs'
 * data (their names are their digests), so any flipped byte is found. */
#define KILN_ARCHIVE_SUM "kiln-archive.sha256"

#endif
