/* kiln — export macro shared by every public header. */
#ifndef KILN_API_H
#define KILN_API_H

#if defined(KILN_BUILDING_LIBRARY) && defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#endif
