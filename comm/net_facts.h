// What a rank can read about the network that carries its traffic to the other ranks
// (docs/comm.md, "Network facts, and the report on one slow link"): the interface, its link
// speed, the rate its root qdisc holds it to, and counters over the run of the interface
// and of TCP in this network namespace. Linux, IPv4. Every reader degrades to "unknown"
// (NaN, or -1 for a counter) where a file or the netlink query fails; nothing here throws
// for a machine that hides its network. It knows no models and no schema: the run summary
// (train/run_summary.h) writes the facts, `ringstep report` judges them.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace ringstep {

// One reading of the interface and of TCP. Trivially copyable: ranks gather it as bytes.
struct NetSnapshot {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  double link_gbps = kNaN;  // /sys/class/net/IF/speed; NaN: unknown (down, or not reported)
  // The rate the interface's root qdisc holds its egress to: tbf's rate, or htb's top-level
  // classes' ceilings added up. 0: the root qdisc holds no rate; NaN: unknown.
  double cap_gbps = kNaN;
  // /proc/net/snmp's Tcp OutSegs and RetransSegs: every TCP socket of this network
  // namespace (a real host's whole TCP). -1: unknown.
  int64_t tcp_out_segs = -1, tcp_retrans_segs = -1;
  // /sys/class/net/IF/statistics. -1: unknown.
  int64_t tx_bytes = -1, rx_bytes = -1, tx_dropped = -1, rx_dropped = -1, tx_errors = -1,
          rx_errors = -1;
};

// One rank's facts over a run: snapshots at its start and end.
struct NetFacts {
  std::string interface;  // "": no network between this rank and the others (every peer is
                          // on this host), or none of this host's interfaces reaches them
  NetSnapshot start, end;
};

// Where the readers look; tests point them at sample files.
struct NetPaths {
  std::string proc_net_snmp = "/proc/net/snmp";
  std::string sys_class_net = "/sys/class/net";
};

// An IPv4 address of an interface that is up and not loopback (host byte order).
struct IfAddr {
  std::string name;
  uint32_t addr = 0;
  int prefix_len = 32;
};

// This host's up, non-loopback IPv4 addresses (getifaddrs).
std::vector<IfAddr> interface_addresses();
// The addresses Open MPI's TCP transport may use under SPEC, the value of
// btl_tcp_if_include: interface names and CIDRs, comma-separated. Empty SPEC: all of them.
std::vector<IfAddr> filter_if_include(const std::vector<IfAddr>& addrs, const std::string& spec);
// The interface of MINE whose subnet holds the most of PEERS (addresses of ranks on other
// hosts); ties go to the first in MINE. "" when none holds any.
std::string subnet_interface(const std::vector<IfAddr>& mine, const std::vector<uint32_t>& peers);

// Parsers of the kernel's text files; sample text in, -1 or NaN for what is not there.
struct TcpCounters {
  int64_t out_segs = -1, retrans_segs = -1;
};
TcpCounters parse_proc_net_snmp(const std::string& text);
// One integer file of /sys (a counter, or the speed in Mbit/s); -1 when it is not one.
int64_t parse_sys_integer(const std::string& text);

// A root qdisc's or class's rate from an rtnetlink dump (RTM_NEWQDISC / RTM_NEWTCLASS
// messages, as RTM_GETQDISC and RTM_GETTCLASS answer).
struct TcEntry {
  int ifindex = 0;
  uint32_t parent = 0;          // TC_H_ROOT (0xFFFFFFFF) for a root qdisc or a top-level class
  std::string kind;             // "tbf", "htb", "fq_codel", ...
  double rate_bytes_per_s = 0;  // tbf: rate; htb class: ceil; 0 for others
};
std::vector<TcEntry> parse_tc_dump(const void* data, size_t bytes);
// IFINDEX's cap in Gbit/s from its qdiscs and classes: 0 when the root qdisc is neither tbf
// nor htb (or htb with no top-level class); NaN when there is no root qdisc in QDISCS.
double root_cap_gbps(const std::vector<TcEntry>& qdiscs, const std::vector<TcEntry>& classes,
                     int ifindex);

// Reads INTERFACE's snapshot now (all unknown for "").
NetSnapshot read_net_snapshot(const std::string& interface, const NetPaths& paths = {});

// ALLGATHER(buf, bytes_per_rank) gathers every rank's bytes in rank order, as
// Communicator::allgather_bytes does; every rank must make the same calls.
using AllgatherBytes = std::function<void(void* buf, size_t bytes_per_rank)>;

// The interface that carries this rank's traffic to ranks on other hosts: this host's
// addresses (filtered by the environment's OMPI_MCA_btl_tcp_if_include) are gathered; ranks
// with the same set are on this host; the interface whose subnet holds most of the others'
// addresses, else the one the kernel routes the first of them through. Collective.
std::string traffic_interface(int rank, int world, const AllgatherBytes& allgather);

// Every rank's FACTS, in rank order, on every rank. Collective.
std::vector<NetFacts> gather_net_facts(const NetFacts& facts, int rank, int world,
                                       const AllgatherBytes& allgather);

}  // namespace ringstep
