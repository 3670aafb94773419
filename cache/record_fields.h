/* Internal: the record's fields as one table (cache/record_fields.def) and
 * what every user of the table needs: the type classes, the records table's
 * SELECT list, and compile-time checks that each row's type class is the C
 * type of its member. */
#ifndef KILN_CACHE_RECORD_FIELDS_H
#define KILN_CACHE_RECORD_FIELDS_H

#include <stdint.h> /* int64_t, uint64_t for the type checks */

#include "cache/record_fields.def" /* KILN_RECORD_FIELDS */
#include "kiln/cache.h"            /* kiln_record */

/* The largest blob, 1 GiB, defined once: a record may say no more (cache/remote/record.c), an
 * archive member may be no larger (cache/archive.h), and a bigger file at a blob's path is
 * refused by its size before a byte is read (cache/blobs.c). */
#define KILN_BLOB_SIZE_MAX (1ull << 30)

/* A row's type class as a value, for code that handles one class at a time:
 * KILN_FIELD_##type. */
typedef enum kiln_field_type {
  KILN_FIELD_TEXT,
  KILN_FIELD_U64,
  KILN_FIELD_INT,
  KILN_FIELD_INT64,
  KILN_FIELD_DOUBLE,
} kiln_field_type;

/* "key, unit, ..., last_used": the records table's columns in row order, the
 * order kiln_record_from_row reads them in. */
#define KILN_RECORD_COLUMN_(field, type, column, decl, json, canon, wire) column
#define KILN_RECORD_COLUMNS KILN_RECORD_FIELDS(KILN_RECORD_COLUMN_, ", ")

/* Lines of the canonical text after its first (the rows with canon > 0). */
#define KILN_RECORD_CANON_(field, type, column, decl, json, canon, wire) +((canon) > 0)
#define KILN_RECORD_CANON_LINES (0 KILN_RECORD_FIELDS(KILN_RECORD_CANON_, ))

/* A row whose type class is not its member's C type would be bound, printed
 * or copied as the wrong type: refuse to compile. */
#define KILN_FIELD_CTYPE_TEXT char *
#define KILN_FIELD_CTYPE_U64 uint64_t
#define KILN_FIELD_CTYPE_INT int
#define KILN_FIELD_CTYPE_INT64 int64_t
#define KILN_FIELD_CTYPE_DOUBLE double
#define KILN_FIELD_TYPE_CHECK_(field, type, column, decl, json, canon, wire)                       \
  _Static_assert(_Generic(((kiln_record *)0)->field, KILN_FIELD_CTYPE_##type : 1, default : 0),    \
                 "kiln_record." #field " is not " #type " (cache/record_fields.def)");
KILN_RECORD_FIELDS(KILN_FIELD_TYPE_CHECK_, )

#endif
