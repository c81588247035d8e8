/* fjtest.h: helpers shared by the Check suites. */
#ifndef FJTEST_H
#define FJTEST_H

#include <stddef.h>

/* Scans /proc/self/maps; returns 1 and describes the first mapping that is
 * both writable and executable, else 0. */
int fjt_maps_has_wx(char *detail, size_t n);

#endif
