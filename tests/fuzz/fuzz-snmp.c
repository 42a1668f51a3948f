/* fuzz-snmp — the parsers of /proc/net/snmp, netstat (header/value line pairs) and snmp6 ("Name
 * value" lines) on arbitrary text, and lookups in what they produced. The text is
 * NUL-terminated, as snmp_read() hands it over. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        SnmpSnapshot s = {};
        uint64_t v;
        char *text;
        int r;

        fuzz_quiet();
        if (size > 1024 * 1024) /* SNMP_FILE_MAX */
                return 0;
        text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = '\0';

        /* the daemon reads all three files into one snapshot */
        r = snmp_parse(&s, text, false);
        FUZZ_ASSERT(r == 0 || r == -ENOMEM);
        r = snmp_parse(&s, text, true);
        FUZZ_ASSERT(r == 0 || r == -ENOMEM);
        snmp_finish(&s);

        for (size_t i = 0; i < s.n; i++) {
                const char *k = s.entries[i].key;
                FUZZ_ASSERT(k && strchr(k, '.'));
                FUZZ_ASSERT(snmp_get(&s, k, &v) == 0);
        }
        FUZZ_USE(snmp_get(&s, "Tcp.RetransSegs", &v));
        FUZZ_USE(snmp_get(&s, "Ip6.Ip6InHdrErrors", &v));
        FUZZ_USE(snmp_get(&s, "", &v));

        snmp_done(&s);
        free(text);
        return 0;
}
