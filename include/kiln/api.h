/* kiln — what every public header shares: the export macro and the
 * "from the environment" sentinel of option structs. */
#ifndef KILN_API_H
#define KILN_API_H

#if defined(KILN_BUILDING_LIBRARY) && defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

/* An options field set to KILN_ENV (a number) or NULL (a string) is taken
 * from its KILN_* environment variable, or that variable's default when it is
 * unset. Every field that can come from the environment says which variable;
 * the _INIT macros and kiln_*_options_init set every such field this way. Any
 * other value is used as given, and one out of range is KILN_EINVAL. */
#define KILN_ENV (-1)

#endif
