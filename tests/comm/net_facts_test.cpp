// The network-fact readers on sample text: /proc/net/snmp, /sys/class/net's files, an
// rtnetlink dump of qdiscs and classes built byte by byte, the interface choice and the
// gather's byte layout.
#include "comm/net_facts.h"

#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ringstep {
namespace {

namespace fs = std::filesystem;

// As the kernel writes it (6.x), counters from a namespace host after an iperf3 run.
constexpr const char* kSnmp =
    "Ip: Forwarding DefaultTTL InReceives InHdrErrors\n"
    "Ip: 2 64 85327 0\n"
    "Icmp: InMsgs InErrors\n"
    "Icmp: 0 0\n"
    "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets "
    "CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
    "Tcp: 1 200 120000 -1 4 3 0 0 2 45012 42458 1658 0 1 0\n"
    "Udp: InDatagrams NoPorts\n"
    "Udp: 0 0\n";

TEST(NetFacts, ParsesTcpCountersFromProcNetSnmp) {
  const TcpCounters c = parse_proc_net_snmp(kSnmp);
  EXPECT_EQ(c.out_segs, 42458);
  EXPECT_EQ(c.retrans_segs, 1658);
  const TcpCounters none = parse_proc_net_snmp("Ip: Forwarding\nIp: 2\n");
  EXPECT_EQ(none.out_segs, -1);
  EXPECT_EQ(none.retrans_segs, -1);
  EXPECT_EQ(parse_proc_net_snmp("").retrans_segs, -1);
}

TEST(NetFacts, ParsesSysIntegers) {
  EXPECT_EQ(parse_sys_integer("10000\n"), 10000);
  EXPECT_EQ(parse_sys_integer("62426725\n"), 62426725);
  EXPECT_EQ(parse_sys_integer("-1\n"), -1);  // a veth that is down, or no speed at all
  EXPECT_EQ(parse_sys_integer(""), -1);      // the read failed (EINVAL)
  EXPECT_EQ(parse_sys_integer("12 Mb\n"), -1);
}

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST(NetFacts, ReadsASnapshotFromTheFiles) {
  const fs::path root =
      fs::temp_directory_path() / ("ringstep_netfacts_" + std::to_string(getpid()));
  fs::remove_all(root);
  const NetPaths paths{(root / "snmp").string(), (root / "net").string()};
  Write(root / "snmp", kSnmp);
  const fs::path dev = root / "net" / "rstest9";  // no such interface: the cap stays unknown
  Write(dev / "speed", "100000\n");
  const std::vector<std::pair<const char*, int>> stats = {
      {"tx_bytes", 62426725}, {"rx_bytes", 59441329}, {"tx_dropped", 1},
      {"rx_dropped", 2},      {"tx_errors", 3},       {"rx_errors", 4}};
  for (const auto& [name, value] : stats)
    Write(dev / "statistics" / name, std::to_string(value) + "\n");
  NetSnapshot s = read_net_snapshot("rstest9", paths);
  EXPECT_EQ(s.link_gbps, 100);
  EXPECT_TRUE(std::isnan(s.cap_gbps));
  EXPECT_EQ(s.tcp_out_segs, 42458);
  EXPECT_EQ(s.tcp_retrans_segs, 1658);
  EXPECT_EQ((std::vector<int64_t>{s.tx_bytes, s.rx_bytes, s.tx_dropped, s.rx_dropped, s.tx_errors,
                                  s.rx_errors}),
            (std::vector<int64_t>{62426725, 59441329, 1, 2, 3, 4}));
  // A veth reports -1 when down; a missing counter is unknown, not 0.
  Write(dev / "speed", "-1\n");
  fs::remove(dev / "statistics" / "rx_errors");
  s = read_net_snapshot("rstest9", paths);
  EXPECT_TRUE(std::isnan(s.link_gbps));
  EXPECT_EQ(s.rx_errors, -1);
  EXPECT_EQ(s.tx_errors, 3);
  // A file whose read fails (sysfs gives EINVAL for the speed of lo or of a link that is
  // down) is unknown, not an exception.
  EXPECT_TRUE(std::isnan(read_net_snapshot("lo").link_gbps));
  // No interface: nothing is read.
  s = read_net_snapshot("", paths);
  EXPECT_EQ(s.tcp_retrans_segs, -1);
  EXPECT_TRUE(std::isnan(s.link_gbps));
  fs::remove_all(root);
}

// Netlink messages as the kernel answers RTM_GETQDISC / RTM_GETTCLASS dumps.
class Dump {
 public:
  // One message; OPTIONS are (type, payload) attributes nested in TCA_OPTIONS.
  void add(uint16_t type, int ifindex, uint32_t parent, const std::string& kind,
           const std::vector<std::pair<uint16_t, std::vector<char>>>& options) {
    std::vector<char> attrs;
    attr(attrs, TCA_KIND, std::vector<char>(kind.begin(), kind.end()), true);
    std::vector<char> nested;
    for (const auto& [t, payload] : options) attr(nested, t, payload, false);
    attr(attrs, TCA_OPTIONS, nested, false);
    nlmsghdr h{};
    h.nlmsg_type = type;
    h.nlmsg_len = NLMSG_LENGTH(NLMSG_ALIGN(sizeof(tcmsg)) + attrs.size());
    tcmsg tc{};
    tc.tcm_ifindex = ifindex;
    tc.tcm_parent = parent;
    append(bytes_, h);  // 16 bytes, aligned
    append(bytes_, tc);
    bytes_.resize(bytes_.size() + NLMSG_ALIGN(sizeof tc) - sizeof tc);
    bytes_.insert(bytes_.end(), attrs.begin(), attrs.end());  // whole attributes: aligned
  }
  std::vector<TcEntry> parsed() const { return parse_tc_dump(bytes_.data(), bytes_.size()); }

 private:
  template <class T>
  static void append(std::vector<char>& out, const T& v) {
    const char* p = reinterpret_cast<const char*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  static void attr(std::vector<char>& out, uint16_t type, std::vector<char> payload, bool nul) {
    if (nul) payload.push_back('\0');
    rtattr a{};
    a.rta_type = type;
    a.rta_len = uint16_t(RTA_LENGTH(payload.size()));
    append(out, a);
    out.insert(out.end(), payload.begin(), payload.end());
    out.insert(out.end(), RTA_ALIGN(a.rta_len) - a.rta_len, '\0');
  }
  std::vector<char> bytes_;
};

template <class T>
std::vector<char> Bytes(const T& v) {
  std::vector<char> b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

std::vector<char> Tbf(uint32_t bytes_per_s) {
  tc_tbf_qopt q{};
  q.rate.rate = bytes_per_s;
  return Bytes(q);
}

std::vector<char> HtbClass(uint32_t rate, uint32_t ceil) {
  tc_htb_opt o{};
  o.rate.rate = rate;
  o.ceil.rate = ceil;
  return Bytes(o);
}

TEST(NetFacts, RootQdiscCapFromAnRtnetlinkDump) {
  Dump q;
  q.add(RTM_NEWQDISC, 2, TC_H_ROOT, "tbf", {{TCA_TBF_PARMS, Tbf(12500000)}});  // 0.1 Gbit/s
  q.add(RTM_NEWQDISC, 3, TC_H_ROOT, "tbf",
        {{TCA_TBF_PARMS, Tbf(~0u)}, {TCA_TBF_RATE64, Bytes(uint64_t{5000000000})}});  // 40
  q.add(RTM_NEWQDISC, 4, TC_H_ROOT, "htb", {});
  q.add(RTM_NEWQDISC, 5, TC_H_ROOT, "noqueue", {});
  q.add(RTM_NEWQDISC, 6, 0x10001, "tbf", {{TCA_TBF_PARMS, Tbf(1000)}});  // not the root
  const std::vector<TcEntry> qdiscs = q.parsed();
  ASSERT_EQ(qdiscs.size(), 5u);
  EXPECT_EQ(qdiscs[0].kind, "tbf");
  EXPECT_EQ(qdiscs[0].ifindex, 2);
  Dump c;  // htb on 4: two top-level classes, and a child whose ceiling is within its parent's
  c.add(RTM_NEWTCLASS, 4, TC_H_ROOT, "htb", {{TCA_HTB_PARMS, HtbClass(25000000, 37500000)}});
  c.add(RTM_NEWTCLASS, 4, TC_H_ROOT, "htb", {{TCA_HTB_PARMS, HtbClass(1000, 12500000)}});
  c.add(RTM_NEWTCLASS, 4, 0x10010, "htb", {{TCA_HTB_PARMS, HtbClass(1000, 37500000)}});
  const std::vector<TcEntry> classes = c.parsed();
  EXPECT_DOUBLE_EQ(root_cap_gbps(qdiscs, classes, 2), 0.1);
  EXPECT_DOUBLE_EQ(root_cap_gbps(qdiscs, classes, 3), 40);
  EXPECT_DOUBLE_EQ(root_cap_gbps(qdiscs, classes, 4), 0.4);    // 0.3 + 0.1
  EXPECT_EQ(root_cap_gbps(qdiscs, {}, 4), 0);                  // htb without classes
  EXPECT_EQ(root_cap_gbps(qdiscs, classes, 5), 0);             // no rate
  EXPECT_TRUE(std::isnan(root_cap_gbps(qdiscs, classes, 6)));  // no root qdisc seen
  EXPECT_TRUE(parse_tc_dump(nullptr, 0).empty());
}

uint32_t Ip(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return uint32_t(a) << 24 | uint32_t(b) << 16 | uint32_t(c) << 8 | d;
}

TEST(NetFacts, TheInterfaceInThePeersSubnetUnderBtlTcpIfInclude) {
  const std::vector<IfAddr> mine = {{"eth0", Ip(192, 0, 2, 2), 24},
                                    {"ib0", Ip(10, 213, 0, 3), 24},
                                    {"docker0", Ip(172, 17, 0, 1), 16}};
  EXPECT_EQ(filter_if_include(mine, "").size(), 3u);
  std::vector<IfAddr> kept = filter_if_include(mine, "10.213.0.0/24");
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].name, "ib0");
  kept = filter_if_include(mine, "eth0,172.17.0.0/16");
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].name, "eth0");
  EXPECT_EQ(kept[1].name, "docker0");
  EXPECT_TRUE(filter_if_include(mine, "eth1,10.9.0.0/16").empty());
  // The interface whose subnet holds most of the other hosts' addresses.
  EXPECT_EQ(subnet_interface(mine, {Ip(10, 213, 0, 2), Ip(10, 213, 0, 4), Ip(192, 0, 2, 9)}),
            "ib0");
  EXPECT_EQ(subnet_interface(mine, {Ip(192, 0, 2, 9)}), "eth0");
  EXPECT_EQ(subnet_interface(kept, {Ip(10, 213, 0, 2)}), "");  // ib0 filtered out
  EXPECT_EQ(subnet_interface(mine, {}), "");
}

TEST(NetFacts, GatherCarriesEveryRanksFactsInRankOrder) {
  NetFacts mine;
  mine.interface = "enp65s0f1np1";
  mine.start.cap_gbps = 0.1, mine.start.tcp_retrans_segs = 7;
  mine.end.link_gbps = 25, mine.end.tx_bytes = int64_t{1} << 40;
  // A world of 3 seen from rank 1: the others' slots are filled by the "transport".
  const AllgatherBytes fake = [](void* buf, size_t n) {
    char* b = static_cast<char*>(buf);
    std::memcpy(b, b + n, n);
    std::memcpy(b + 2 * n, b + n, n);
    std::memset(b + 2 * n, 0, 16);  // rank 2: no interface
  };
  const std::vector<NetFacts> all = gather_net_facts(mine, 1, 3, fake);
  ASSERT_EQ(all.size(), 3u);
  for (const NetFacts& f : all) {
    EXPECT_EQ(f.start.cap_gbps, 0.1);
    EXPECT_EQ(f.start.tcp_retrans_segs, 7);
    EXPECT_EQ(f.end.link_gbps, 25);
    EXPECT_EQ(f.end.tx_bytes, int64_t{1} << 40);
  }
  EXPECT_EQ(all[0].interface, "enp65s0f1np1");
  EXPECT_EQ(all[1].interface, "enp65s0f1np1");
  EXPECT_EQ(all[2].interface, "");
}

}  // namespace
}  // namespace ringstep
