/* core/bytes.h: each unit's threshold from both sides, exact units, the
 * digits of each unit and system, rounding up into the next unit's number,
 * the largest values, and a buffer too small. The texts are the ones the
 * swap manager's messages (binary) and `inspect` (decimal) printed before
 * they shared the formatter. */
#include "core/bytes.h"
#include "test.h"

static void expect(uint64_t n, enum bytes_units u, const char *want)
{
    char buf[64];
    const char *got = bytes_format(buf, sizeof(buf), n, u);
    CHECK_MSG(got == buf && strcmp(got, want) == 0, "%llu %s: \"%s\", want \"%s\"",
              (unsigned long long)n, u == BYTES_BINARY ? "binary" : "decimal", got, want);
}

TEST(binary)
{
    expect(0, BYTES_BINARY, "0 B");
    expect(1, BYTES_BINARY, "1 B");
    expect(1023, BYTES_BINARY, "1023 B");
    expect(1024, BYTES_BINARY, "1.0 KiB");
    expect(1536, BYTES_BINARY, "1.5 KiB");
    expect(640 * 1024, BYTES_BINARY, "640.0 KiB");
    expect((1u << 20) - 1, BYTES_BINARY, "1024.0 KiB"); /* rounds, still KiB */
    expect(1u << 20, BYTES_BINARY, "1.0 MiB");
    expect(12u << 20, BYTES_BINARY, "12.0 MiB");
    expect((1ull << 30) - 1, BYTES_BINARY, "1024.0 MiB");
    expect(1ull << 30, BYTES_BINARY, "1.00 GiB");
    expect(3ull << 29, BYTES_BINARY, "1.50 GiB");
    expect(1ull << 40, BYTES_BINARY, "1024.00 GiB"); /* no TiB */
    expect(UINT64_MAX, BYTES_BINARY, "17179869184.00 GiB");
}

TEST(decimal)
{
    expect(0, BYTES_DECIMAL, "0 B");
    expect(999, BYTES_DECIMAL, "999 B");
    expect(1000, BYTES_DECIMAL, "1 kB");
    expect(1023, BYTES_DECIMAL, "1 kB");
    expect(1024, BYTES_DECIMAL, "1 kB");
    expect(789000, BYTES_DECIMAL, "789 kB");
    expect(999999, BYTES_DECIMAL, "1000 kB"); /* rounds, still kB */
    expect(1000000, BYTES_DECIMAL, "1.0 MB");
    expect(45600000, BYTES_DECIMAL, "45.6 MB");
    expect(1000000000, BYTES_DECIMAL, "1.00 GB");
    expect(1234567890, BYTES_DECIMAL, "1.23 GB");
    expect(1000000000000ull, BYTES_DECIMAL, "1000.00 GB"); /* no TB */
    expect(UINT64_MAX, BYTES_DECIMAL, "18446744073.71 GB");
}

TEST(small_buffer)
{
    char buf[6];
    CHECK(strcmp(bytes_format(buf, sizeof(buf), 12u << 20, BYTES_BINARY), "12.0 ") == 0);
    CHECK(strcmp(bytes_format(buf, 1, 5, BYTES_DECIMAL), "") == 0);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
