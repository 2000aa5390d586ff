/* The public header must compile alone as strict C99. */
#include <outbox.h>
int outbox_header_check_c(void);
int outbox_header_check_c(void) { return OUTBOX_VERSION_NUMBER > 0 ? (int)OUTBOX_OK : 1; }
