/* fjtest.c: helpers shared by the Check suites. */
#include "fjtest.h"

#include <stdio.h>
#include <string.h>

int fjt_maps_has_wx(char *detail, size_t n) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        char perms[8] = {0};
        if (sscanf(line, "%*s %7s", perms) == 1 && perms[1] == 'w' && perms[2] == 'x') {
            if (detail && n) snprintf(detail, n, "%s", line);
            found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}
