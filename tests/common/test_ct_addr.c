/*
 * test_ct_addr.c - endpoint parsing: the forms users write (names, IPv4, bracketed and bare
 * IPv6, zone ids, default ports) and a precise one-line message for each mistake.
 */
#include "ct_addr.h"
#include "ct_test.h"

static void expect_ok(const char *text, int dflt, const char *host, int port, ct_host_kind_t kind,
                      bool has_port)
{
    ct_hostport_t hp;
    ct_errbuf_t eb = {{0}};
    int rc = ct_hostport_parse(text, dflt, true, &hp, &eb);
    CT_ASSERT_MSG(rc == 0, "%s: %s", text, eb.msg);
    CT_ASSERT_STR_EQ(hp.host, host);
    CT_ASSERT_EQ(hp.port, port);
    CT_ASSERT_EQ(hp.kind, kind);
    CT_ASSERT_EQ(hp.has_port, has_port);
}

static void test_good_addresses(void)
{
    expect_ok("localhost:29500", -1, "localhost", 29500, CT_HOST_NAME, true);
    expect_ok("node-3.cluster.local:1", -1, "node-3.cluster.local", 1, CT_HOST_NAME, true);
    expect_ok("127.0.0.1:0", -1, "127.0.0.1", 0, CT_HOST_IPV4, true);
    expect_ok("10.1.2.3", 29400, "10.1.2.3", 29400, CT_HOST_IPV4, false);
    expect_ok("[::1]:29500", -1, "::1", 29500, CT_HOST_IPV6, true);
    expect_ok("[fe80::1%eth0]:80", -1, "fe80::1%eth0", 80, CT_HOST_IPV6, true);
    expect_ok("[2001:db8::7]", 29400, "2001:db8::7", 29400, CT_HOST_IPV6, false);
    expect_ok("::1", 29400, "::1", 29400, CT_HOST_IPV6, false);
    expect_ok("my_host:65535", -1, "my_host", 65535, CT_HOST_NAME, true);
    expect_ok("a1.b2", 5, "a1.b2", 5, CT_HOST_NAME, false);
}

static void expect_err(const char *text, int dflt, bool allow_zero, const char *want)
{
    ct_hostport_t hp;
    ct_errbuf_t eb = {{0}};
    int rc = ct_hostport_parse(text, dflt, allow_zero, &hp, &eb);
    CT_ASSERT_MSG(rc != 0, "%s should be rejected", text ? text : "(null)");
    CT_ASSERT_STR_EQ(eb.msg, want);
}

static void test_bad_addresses(void)
{
    expect_err("", -1, true, "empty address (expected host:port)");
    expect_err("host:", -1, true, "address \"host:\": missing port after ':'");
    expect_err("host", -1, true, "address \"host\": missing port (expected host:port)");
    expect_err("host:70000", -1, true,
               "address \"host:70000\": port 70000 is out of range (expected 0..65535)");
    expect_err("host:0", -1, false,
               "address \"host:0\": port 0 is not allowed here (expected 1..65535)");
    expect_err("host:12ab", -1, true, "address \"host:12ab\": port \"12ab\" is not a number");
    expect_err("host:-1", -1, true, "address \"host:-1\": port \"-1\" is not a number");
    expect_err(":29500", -1, true, "address \":29500\": empty host");
    expect_err("256.1.1.1:80", -1, true,
               "address \"256.1.1.1:80\": \"256.1.1.1\" is not a valid IPv4 address");
    expect_err("10.0.0:80", -1, true, "address \"10.0.0:80\": \"10.0.0\" is not a valid IPv4 address");
    expect_err("bad host:80", -1, true,
               "address \"bad host:80\": host \"bad host\" contains ' ', which is not allowed in a "
               "host name");
    expect_err("a..b:1", -1, true, "address \"a..b:1\": host \"a..b\" has an empty label");
    expect_err("-a.b:1", -1, true,
               "address \"-a.b:1\": host \"-a.b\" has a label that starts or ends with '-'");
    expect_err("[::1", -1, true, "address \"[::1\": '[' without ']'");
    expect_err("[::1]x", -1, true, "address \"[::1]x\": unexpected text after ']'");
    expect_err("[host]:1", -1, true, "address \"[host]:1\": brackets are only for IPv6 addresses");
    expect_err("[::zz]:1", -1, true, "address \"[::zz]:1\": \"::zz\" is not a valid IPv6 address");
    expect_err("fe80::1:29500x", -1, true,
               "address \"fe80::1:29500x\": write IPv6 addresses with a port as [addr]:port");
    expect_err("[fe80::1%]:1", -1, true,
               "address \"[fe80::1%]:1\": \"fe80::1%\" is not a valid IPv6 address");
}

static void test_long_inputs_are_bounded(void)
{
    char big[1200];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ct_hostport_t hp;
    ct_errbuf_t eb;
    CT_ASSERT_ERR(ct_hostport_parse(big, 1, true, &hp, &eb), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "characters long");
    /* 64-character labels are too long even when the whole name is short enough. */
    char label[80];
    memset(label, 'b', 64);
    strcpy(label + 64, ".x:1");
    CT_ASSERT_ERR(ct_hostport_parse(label, 1, true, &hp, &eb), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "label over 63 characters");
    /* 261 characters in valid labels: over the 253 limit. */
    char name[400] = "";
    for (int i = 0; i < 26; i++)
        strcat(name, "abcdefghi.");
    strcat(name, "z");
    CT_ASSERT_ERR(ct_hostport_parse(name, 1, true, &hp, &eb), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "at most 253");
}

static void test_format_round_trips(void)
{
    const char *inputs[] = {"localhost:29500", "[::1]:7", "10.0.0.1:65535", "[fe80::1%lo]:1"};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        ct_hostport_t hp;
        CT_ASSERT_OK(ct_hostport_parse(inputs[i], -1, true, &hp, NULL));
        char buf[300];
        ct_hostport_format(&hp, buf, sizeof buf);
        CT_ASSERT_STR_EQ(buf, inputs[i]);
    }
}

static void test_port_parse(void)
{
    int p;
    CT_ASSERT_OK(ct_port_parse("29500", false, &p, NULL));
    CT_ASSERT_EQ(p, 29500);
    ct_errbuf_t eb;
    CT_ASSERT_ERR(ct_port_parse("", false, &p, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_port_parse(" 80", false, &p, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_port_parse("0", false, &p, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_OK(ct_port_parse("0", true, &p, &eb));
    CT_ASSERT_EQ(p, 0);
}

int main(void)
{
    CT_RUN(test_good_addresses);
    CT_RUN(test_bad_addresses);
    CT_RUN(test_long_inputs_are_bounded);
    CT_RUN(test_format_round_trips);
    CT_RUN(test_port_parse);
    return 0;
}
