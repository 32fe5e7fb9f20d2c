/* cluster/proto's decoder on arbitrary bytes: never a crash, leak or read
 * past the input; a message it accepts re-encodes to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_msg m;
    if (proto_decode(data, size, &m) != 0)
        return 0;
    struct strbuf b = {0};
    if (proto_encode(&m, &b) != 0 || b.len != size || memcmp(b.p, data, size) != 0)
        abort();
    strbuf_free(&b);
    proto_msg_free(&m);
    return 0;
}
