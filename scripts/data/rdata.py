"""Minimal reader for R lazy-load databases (Rdata.rdb/.rdx) and R's XDR serialization.

Enough of the format to read character vectors, lists and data frames, e.g. the six Jane Austen
novels shipped by Debian's r-cran-janeaustenr. No R needed.
"""
import bz2
import gzip
import lzma
import struct
import zlib

NILVALUE_SXP, REFSXP, GLOBALENV_SXP, EMPTYENV_SXP, BASEENV_SXP, MISSINGARG_SXP = 254, 255, 253, 242, 241, 251
BASENAMESPACE_SXP, UNBOUNDVALUE_SXP, NAMESPACESXP, PACKAGESXP, PERSISTSXP = 247, 252, 249, 250, 247


class RObj:
    def __init__(self, type_, value, attrs=None):
        self.type, self.value, self.attrs = type_, value, attrs or {}

    def __repr__(self):
        return f"RObj({self.type}, {str(self.value)[:60]}, attrs={list(self.attrs)})"


class _Reader:
    def __init__(self, data):
        self.d, self.p, self.refs = data, 0, []

    def int(self):
        v = struct.unpack_from(">i", self.d, self.p)[0]
        self.p += 4
        return v

    def bytes(self, n):
        b = self.d[self.p:self.p + n]
        self.p += n
        return b

    def header(self):
        fmt = self.bytes(2)
        if fmt != b"X\n":
            raise ValueError(f"unsupported R serialization format {fmt!r}")
        version = self.int()
        self.int(); self.int()  # writer version, min reader version
        if version == 3:
            n = self.int()
            self.bytes(n)  # native encoding
        return self.item()

    def item(self):
        flags = self.int()
        t = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        if t == NILVALUE_SXP:
            return None
        if t in (EMPTYENV_SXP, BASEENV_SXP, GLOBALENV_SXP, UNBOUNDVALUE_SXP, MISSINGARG_SXP, BASENAMESPACE_SXP):
            return RObj("special", t)
        if t == REFSXP:
            idx = flags >> 8
            if idx == 0:
                idx = self.int()
            return self.refs[idx - 1]
        if t == 1:  # SYMSXP
            o = RObj("sym", None)
            self.refs.append(o)
            o.value = self.item().value
            return o
        if t in (NAMESPACESXP, PACKAGESXP, PERSISTSXP):
            self.int()  # 0
            n = self.int()
            o = RObj("ns", [self.item() for _ in range(n)])
            self.refs.append(o)
            return o
        if t == 4:  # ENVSXP
            o = RObj("env", None)
            self.refs.append(o)
            self.int()
            enclos, frame, hashtab, attr = self.item(), self.item(), self.item(), self.item()
            o.value = (frame, hashtab)
            return o
        if t in (2, 6, 17, 5):  # LISTSXP LANGSXP DOTSXP PROMSXP (pairlists)
            attrs = self._attrs() if has_attr else {}
            tag = self.item() if has_tag else None
            car = self.item()
            cdr = self.item()
            items = [(tag.value if tag is not None else None, car)]
            if isinstance(cdr, RObj) and cdr.type == "pairlist":
                items += cdr.value
            return RObj("pairlist", items, attrs)
        if t == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return RObj("char", None)
            raw = self.bytes(n)
            enc = "latin-1" if flags & (1 << 12 + 2) and not flags & (1 << 12 + 3) else "utf-8"
            return RObj("char", raw.decode(enc, errors="replace"))
        if t in (10, 13):  # LGLSXP INTSXP
            n = self.int()
            v = list(struct.unpack_from(f">{n}i", self.d, self.p)); self.p += 4 * n
            return RObj("int", v, self._attrs() if has_attr else {})
        if t == 14:  # REALSXP
            n = self.int()
            v = list(struct.unpack_from(f">{n}d", self.d, self.p)); self.p += 8 * n
            return RObj("real", v, self._attrs() if has_attr else {})
        if t == 16:  # STRSXP
            n = self.int()
            v = [self.item().value for _ in range(n)]
            return RObj("str", v, self._attrs() if has_attr else {})
        if t in (19, 20):  # VECSXP EXPRSXP
            n = self.int()
            v = [self.item() for _ in range(n)]
            return RObj("list", v, self._attrs() if has_attr else {})
        if t == 238:  # ALTREP_SXP
            info = self.item(); state = self.item(); attr = self.item()
            cls = info.value[0][1].value if info and info.type == "pairlist" else None
            if cls in ("compact_intseq",):
                n, start, step = state.value
                return RObj("int", [int(start + i * step) for i in range(int(n))])
            if cls == "wrap_string" or cls == "wrap_integer" or cls == "wrap_real":
                return state.value[0]
            if cls == "deferred_string":
                return state.value[0] if state.type == "pairlist" else state
            raise ValueError(f"unsupported ALTREP class {cls}")
        raise ValueError(f"unsupported SEXP type {t} at offset {self.p}")

    def _attrs(self):
        pl = self.item()
        return {k: v for k, v in pl.value} if pl is not None else {}


def unserialize(data):
    return _Reader(data).header()


def _decompress_entry(blob, compressed):
    n = struct.unpack(">I", blob[:4])[0]
    if compressed in (2, 3):
        kind, body = blob[4:5], blob[5:]
        if kind == b"Z":
            out = lzma.decompress(body)
        elif kind == b"2":
            out = bz2.decompress(body)
        elif kind == b"1":
            out = zlib.decompress(body)
        else:
            out = body
    else:
        out = zlib.decompress(blob[4:])
    assert len(out) == n, (len(out), n)
    return out


def load_lazyload_db(prefix):
    """Returns {name: RObj} for an R lazy-load database <prefix>.rdb/.rdx."""
    rdx_raw = open(prefix + ".rdx", "rb").read()
    if rdx_raw[:2] == b"\x1f\x8b":
        rdx_data = gzip.decompress(rdx_raw)
    else:
        rdx_data = zlib.decompress(rdx_raw[4:])
    index = unserialize(rdx_data)
    fields = {index.attrs["names"].value[i]: index.value[i] for i in range(len(index.value))}
    comp = fields.get("compressed")
    compressed = 1
    if comp is not None:
        compressed = int(comp.value[0])
    variables = fields["variables"]
    names = variables.attrs["names"].value
    rdb = open(prefix + ".rdb", "rb").read()
    out = {}
    for name, pos in zip(names, variables.value):
        off, ln = (int(x) for x in pos.value)
        out[name] = unserialize(_decompress_entry(rdb[off:off + ln], compressed))
    return out
