"""Protocol numbers and layouts, defined once and shared by every decoder and GRO engine.

Each constant cites where it comes from. numba kernels read these module globals as
compile-time constants, so keep them plain ints.
"""

# --- pcap / pcapng link types (https://www.tcpdump.org/linktypes.html) ---
LINKTYPE_NULL = 0              # BSD loopback, host-endian 4-byte AF_ family
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW_OPENBSD = 12      # DLT_RAW on most platforms: raw IPv4/IPv6
LINKTYPE_RAW_BSDOS = 14        # DLT_RAW on BSD/OS
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108            # OpenBSD loopback, big-endian 4-byte AF_ family
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
LINKTYPE_DSA_TAG_BRCM = 281          # Broadcom tag after the source MAC
LINKTYPE_DSA_TAG_BRCM_PREPEND = 282  # Broadcom tag before the destination MAC
LINKTYPE_DSA_TAG_DSA = 284           # Marvell DSA tag after the source MAC
LINKTYPE_DSA_TAG_EDSA = 285          # Marvell EDSA tag (EtherType + DSA) after the source MAC

SUPPORTED_LINKTYPES = (
    LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW_OPENBSD, LINKTYPE_RAW_BSDOS, LINKTYPE_RAW,
    LINKTYPE_LOOP, LINKTYPE_LINUX_SLL, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL2,
    LINKTYPE_DSA_TAG_BRCM, LINKTYPE_DSA_TAG_BRCM_PREPEND, LINKTYPE_DSA_TAG_DSA,
    LINKTYPE_DSA_TAG_EDSA,
)

# --- EtherTypes (IEEE 802 numbers; kernel include/uapi/linux/if_ether.h) ---
ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ETH_P_TEB = 0x6558             # transparent Ethernet bridging (GRE-TEB, Geneve)
ETH_P_8021Q = 0x8100
ETH_P_8021AD = 0x88A8
ETH_P_QINQ1 = 0x9100           # pre-standard QinQ TPID
ETH_P_IPV6 = 0x86DD
ETH_P_ERSPAN = 0x88BE          # ERSPAN type II (GRE protocol)
ETH_P_ERSPAN2 = 0x22EB         # ERSPAN type III (GRE protocol)
ETH_P_EDSA = 0xDADA            # Marvell EDSA (kernel ETH_P_EDSA)
ETH_HLEN = 14
ETH_ZLEN = 60                  # minimum frame without FCS: shorter frames are padded

# --- IP protocol numbers (IANA; include/uapi/linux/in.h) ---
IPPROTO_HOPOPTS = 0
IPPROTO_ICMP = 1
IPPROTO_IPIP = 4
IPPROTO_TCP = 6
IPPROTO_UDP = 17
IPPROTO_IPV6 = 41
IPPROTO_ROUTING = 43
IPPROTO_FRAGMENT = 44
IPPROTO_GRE = 47
IPPROTO_ESP = 50
IPPROTO_AH = 51
IPPROTO_ICMPV6 = 58
IPPROTO_NONE = 59
IPPROTO_DSTOPTS = 60

# IPv4 flags (RFC 791)
IP_RF = 0x8000                 # reserved ("evil") bit
IP_DF = 0x4000
IP_MF = 0x2000
IP_OFFMASK = 0x1FFF

# IPv6 extension-header mask bits, as recorded in the *_ip6_ext_mask columns
IP6_EXT_HOPOPTS = 0x01
IP6_EXT_ROUTING = 0x02
IP6_EXT_DSTOPTS = 0x04
IP6_EXT_FRAGMENT = 0x08
IP6_EXT_OTHER = 0x10           # AH, mobility, ... (stops the walk)

# --- TCP (RFC 9293 3.1; AE from RFC 9768 / kernel TCP_FLAG_AE) ---
TCP_FLAG_FIN = 0x001
TCP_FLAG_SYN = 0x002
TCP_FLAG_RST = 0x004
TCP_FLAG_PSH = 0x008
TCP_FLAG_ACK = 0x010
TCP_FLAG_URG = 0x020
TCP_FLAG_ECE = 0x040
TCP_FLAG_CWR = 0x080
TCP_FLAG_AE = 0x100            # accurate ECN, formerly NS (RFC 3540)
TCPOPT_EOL = 0
TCPOPT_NOP = 1
TCPOPT_MSS = 2
TCPOPT_WSCALE = 3
TCPOPT_SACK_PERM = 4
TCPOPT_SACK = 5
TCPOPT_TIMESTAMP = 8
TCP_MAX_OPTLEN = 40

# --- GRE (RFC 2784/2890; kernel include/net/gre.h GRE_* in network order) ---
GRE_CSUM = 0x8000
GRE_ROUTING = 0x4000
GRE_KEY = 0x2000
GRE_SEQ = 0x1000
GRE_STRICT = 0x0800
GRE_REC = 0x0700
GRE_ACK = 0x0080
GRE_FLAGS = 0x0078
GRE_VERSION = 0x0007

# --- UDP tunnel default ports (IANA) ---
VXLAN_PORT = 4789
VXLAN_GPE_PORT = 4790
GENEVE_PORT = 6081

# --- tunnel type codes, as recorded in the tun_type column ---
TUN_NONE = 0
TUN_GRE = 1            # GRE v0, inner IPv4/IPv6
TUN_GRE_TEB = 2        # GRE v0, inner Ethernet (gretap / ip6gretap)
TUN_ERSPAN2 = 3        # GRE protocol 0x88BE, ERSPAN type II, inner Ethernet
TUN_ERSPAN3 = 4        # GRE protocol 0x22EB, ERSPAN type III, inner Ethernet
TUN_IPIP = 5           # IPv4 in IPv4 (proto 4)
TUN_SIT = 6            # IPv6 in IPv4 (proto 41)
TUN_IP6IP6 = 7         # IPv6 in IPv6 (nexthdr 41)
TUN_IP4IP6 = 8         # IPv4 in IPv6 (nexthdr 4)
TUN_VXLAN = 9
TUN_VXLAN_GPE = 10
TUN_GENEVE = 11
TUN_FOU = 12
TUN_GUE = 13
TUN_NAMES = {
    TUN_NONE: "none", TUN_GRE: "gre", TUN_GRE_TEB: "gretap", TUN_ERSPAN2: "erspan2",
    TUN_ERSPAN3: "erspan3", TUN_IPIP: "ipip", TUN_SIT: "sit", TUN_IP6IP6: "ip6ip6",
    TUN_IP4IP6: "ip4ip6", TUN_VXLAN: "vxlan", TUN_VXLAN_GPE: "vxlan-gpe",
    TUN_GENEVE: "geneve", TUN_FOU: "fou", TUN_GUE: "gue",
}

# --- DSA tag kinds, as recorded in the dsa_tag column (kernel net/dsa/tag_*.c) ---
DSA_NONE = 0
DSA_BRCM = 1           # 4 bytes after the source MAC (tag_brcm.c)
DSA_BRCM_PREPEND = 2   # 4 bytes before the destination MAC (tag_brcm.c)
DSA_DSA = 3            # 4 bytes after the source MAC (tag_dsa.c)
DSA_EDSA = 4           # 8 bytes after the source MAC: EtherType, 2 reserved, DSA (tag_dsa.c)
DSA_TAG_BY_NAME = {"brcm": DSA_BRCM, "brcm-prepend": DSA_BRCM_PREPEND,
                   "dsa": DSA_DSA, "edsa": DSA_EDSA}
DSA_TAG_LINKTYPE = {LINKTYPE_DSA_TAG_BRCM: DSA_BRCM,
                    LINKTYPE_DSA_TAG_BRCM_PREPEND: DSA_BRCM_PREPEND,
                    LINKTYPE_DSA_TAG_DSA: DSA_DSA, LINKTYPE_DSA_TAG_EDSA: DSA_EDSA}

# --- pcapng EPB flags word (pcapng spec, section 4.3.1 epb_flags) ---
EPB_FLAG_DIR_MASK = 0x3
EPB_FLAG_FCS_LEN_SHIFT = 5     # bits 5-8: FCS length
EPB_FLAG_FCS_LEN_MASK = 0xF << 5
EPB_FLAG_CSUM_NOT_READY = 1 << 9    # Linux: checksum not ready (offload partial)
EPB_FLAG_CSUM_VALID = 1 << 10       # Linux: checksum valid
EPB_FLAG_TCP_SEG_OFFLOAD = 1 << 11  # Linux: TCP segmentation offloaded (already GSO)

# --- limits ---
MAX_RECORD_LEN = 256 * 1024    # a record longer than this is refused as corrupt
MAX_ENCAP_DEPTH = 8            # layers of encapsulation decoded before ENCAP_TOO_DEEP

# --- decoder layouts (added by the decode layer; read by reference and fast decoders) ---
SLL_HLEN = 16                  # Linux cooked v1 header (tcpdump.org LINKTYPE_LINUX_SLL)
SLL2_HLEN = 20                 # Linux cooked v2 header (LINKTYPE_LINUX_SLL2)
ARPHRD_ETHER = 1               # include/uapi/linux/if_arp.h
NULL_AF_INET = 2               # BSD AF_INET, the same on every BSD
NULL_AF_INET6 = (24, 28, 30)   # AF_INET6 on NetBSD/OpenBSD, FreeBSD, Darwin
ETH_P_802_3_MIN = 0x0600       # below: an 802.3 length, not an EtherType
BRCM_TAG_LEN = 4               # net/dsa/tag_brcm.c
BRCM_OPCODE_SHIFT = 5          # tag_brcm.c: opcode in the top 3 bits of byte 0, must be 0
BRCM_EG_PID_MASK = 0x1F        # tag_brcm.c: source port in byte 3 (egress from the switch)
DSA_HLEN = 4                   # net/dsa/tag_dsa.c
EDSA_HLEN = 8                  # tag_dsa.c: EtherType 0xDADA, 2 reserved bytes, DSA tag
DSA_CMD_TO_CPU = 0             # tag_dsa.c enum dsa_cmd (byte 0 >> 6)
DSA_CMD_FORWARD = 3
DSA_VLAN_TAG = 0x20            # tag_dsa.c: byte 0 bit: frame carried an 802.1Q tag
DSA_CFI_BIT = 0x01             # tag_dsa.c: CFI/DEI moved to byte 1 bit 0 in the DSA tag
IP6_HLEN = 40
IP6_FRAG_HLEN = 8
IP6_EXT_WALK = (IPPROTO_HOPOPTS, IPPROTO_ROUTING, IPPROTO_DSTOPTS, IPPROTO_FRAGMENT)
IP6_EXT_STOP_OTHER = (IPPROTO_AH, 135, 139, 140)   # AH, mobility, HIP, shim6
IPV6_SRCRT_TYPE_4 = 4          # segment routing header (RFC 8754)
TCP_MAX_WSCALE = 14            # RFC 7323 2.3; tcp_parse_options clamps to it
GRE_HLEN = 4
VXLAN_HLEN = 8                 # RFC 7348
VXLAN_FLAG_I = 0x08000000      # first word: VNI valid
GPE_VER_MASK = 0x30            # VXLAN-GPE byte 0 (draft-ietf-nvo3-vxlan-gpe)
GPE_FLAG_P = 0x04              # next protocol present
GPE_NP_IPV4 = 1
GPE_NP_IPV6 = 2
GPE_NP_ETHERNET = 3
GENEVE_HLEN = 8                # RFC 8926 3.4
GENEVE_FLAG_O = 0x80           # byte 1: OAM
GENEVE_FLAG_C = 0x40           # byte 1: critical options
GUE_HLEN = 4                   # draft-ietf-intarea-gue
GUE_FLAG_C = 0x20              # byte 0: control message
GUE_HLEN_MASK = 0x1F           # byte 0: optional fields in 4-byte words
ERSPAN2_HLEN = 8               # include/net/erspan.h erspan_base_hdr
ERSPAN3_HLEN = 12              # erspan_base_hdr + erspan_md2
ERSPAN3_PLATFORM_LEN = 8       # platform-specific subheader when O is set
ERSPAN_V1 = 1                  # type II
ERSPAN_V2 = 2                  # type III
ERSPAN_SESSION_MASK = 0x3FF
GPE_FLAG_O = 0x01              # VXLAN-GPE byte 0: OAM packet
BRCM_EG_RC_RSVD = 0xC0         # tag_brcm.c: reserved reason code bits in byte 2 (dropped)
