// The public header must compile alone as strict C++.
#include <outbox.h>
int outbox_header_check_cpp();
int outbox_header_check_cpp() { return OUTBOX_VERSION_NUMBER > 0 ? static_cast<int>(OUTBOX_OK) : 1; }
