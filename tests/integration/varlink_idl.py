"""varlink_idl.py — a parser for varlink interface descriptions (https://varlink.org, "Interface
Definition") and a checker of JSON values against their types. The tests use it to check that the
shipped io.bigtcpd.Manager.varlink is a valid description and that every reply the daemon sends
has exactly the shape the description declares."""

import re

TOKEN = re.compile(r'''
    (?P<ws>[ \t\r\n]+)
  | (?P<comment>\#[^\n]*)
  | (?P<arrow>->)
  | (?P<punct>[(),:?\[\]])
  | (?P<name>[A-Za-z][A-Za-z0-9_.]*)
''', re.X)

FIELD = re.compile(r'^[A-Za-z](_?[A-Za-z0-9])*$')
TYPE_NAME = re.compile(r'^[A-Z][A-Za-z0-9]*$')
IFACE = re.compile(r'^[A-Za-z]([-]*[A-Za-z0-9])*(\.[A-Za-z0-9]([-]*[A-Za-z0-9])*)+$')


class IdlError(ValueError):
    pass


def tokenize(text):
    pos, out = 0, []
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m:
            raise IdlError(f'unexpected {text[pos:pos + 20]!r} at offset {pos}')
        kind = m.lastgroup
        if kind not in ('ws', 'comment'):
            out.append(m.group())
        pos = m.end()
    return out


class Parser:
    def __init__(self, text):
        self.toks = tokenize(text)
        self.i = 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want=None):
        t = self.peek()
        if t is None or (want is not None and t != want):
            raise IdlError(f'expected {want or "a token"}, got {t!r} (token {self.i})')
        self.i += 1
        return t

    def typ(self):
        t = self.peek()
        if t == '?':
            self.take()
            inner = self.typ()
            if inner[0] == 'maybe':
                raise IdlError('?? is not a type')
            return ('maybe', inner)
        if t == '[':
            self.take()
            if self.peek() == ']':
                self.take()
                return ('array', self.typ())
            self.take('string')
            self.take(']')
            return ('map', self.typ())
        if t == '(':
            return self.struct_or_enum()
        t = self.take()
        if t in ('bool', 'int', 'float', 'string', 'object'):
            return (t,)
        if not TYPE_NAME.match(t):
            raise IdlError(f'bad type name {t!r}')
        return ('ref', t)

    def struct_or_enum(self):
        self.take('(')
        fields, names = {}, []
        while self.peek() != ')':
            n = self.take()
            if not FIELD.match(n):
                raise IdlError(f'bad field name {n!r}')
            if self.peek() == ':':
                self.take()
                if n in fields:
                    raise IdlError(f'duplicate field {n}')
                fields[n] = self.typ()
            else:
                names.append(n)
            if self.peek() == ',':
                self.take()
            elif self.peek() != ')':
                raise IdlError(f'expected , or ) after {n}')
        self.take(')')
        if fields and names:
            raise IdlError('mixed struct and enum')
        return ('enum', tuple(names)) if names else ('struct', fields)

    def parse(self):
        self.take('interface')
        name = self.take()
        if not IFACE.match(name):
            raise IdlError(f'bad interface name {name!r}')
        iface = {'name': name, 'types': {}, 'methods': {}, 'errors': {}}
        while self.peek() is not None:
            kw = self.take()
            n = self.take()
            if not TYPE_NAME.match(n):
                raise IdlError(f'bad member name {n!r}')
            if kw == 'type':
                iface['types'][n] = self.struct_or_enum()
            elif kw == 'method':
                inp = self.struct_or_enum()
                self.take('->')
                out = self.struct_or_enum()
                iface['methods'][n] = (inp, out)
            elif kw == 'error':
                iface['errors'][n] = self.struct_or_enum()
            else:
                raise IdlError(f'unexpected {kw!r}')
        for t in list(iface['types'].values()) + [x for m in iface['methods'].values() for x in m] + \
                list(iface['errors'].values()):
            check_refs(t, iface['types'])
        return iface


def check_refs(t, types):
    if t[0] == 'ref' and t[1] not in types:
        raise IdlError(f'unknown type {t[1]}')
    if t[0] in ('maybe', 'array', 'map'):
        check_refs(t[1], types)
    if t[0] == 'struct':
        for f in t[1].values():
            check_refs(f, types)


def parse(text):
    return Parser(text).parse()


def check(value, t, types, path='$'):
    """Raise IdlError when `value` does not have type `t`. Optional fields may be absent or null;
    fields the type does not declare are errors."""
    kind = t[0]
    if kind == 'maybe':
        if value is not None:
            check(value, t[1], types, path)
        return
    if value is None:
        raise IdlError(f'{path}: null for a non-optional {t}')
    if kind == 'ref':
        return check(value, types[t[1]], types, path)
    if kind == 'bool':
        ok = isinstance(value, bool)
    elif kind == 'int':
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == 'float':
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind == 'string':
        ok = isinstance(value, str)
    elif kind == 'object':
        ok = True
    elif kind == 'enum':
        ok = isinstance(value, str) and value in t[1]
    elif kind == 'array':
        if not isinstance(value, list):
            raise IdlError(f'{path}: not an array')
        for i, v in enumerate(value):
            check(v, t[1], types, f'{path}[{i}]')
        return
    elif kind == 'map':
        if not isinstance(value, dict):
            raise IdlError(f'{path}: not a map')
        for k, v in value.items():
            check(v, t[1], types, f'{path}[{k!r}]')
        return
    elif kind == 'struct':
        if not isinstance(value, dict):
            raise IdlError(f'{path}: not an object')
        extra = set(value) - set(t[1])
        if extra:
            raise IdlError(f'{path}: fields not in the interface: {sorted(extra)}')
        for n, ft in t[1].items():
            if n not in value and ft[0] != 'maybe':
                raise IdlError(f'{path}: missing field {n}')
            check(value.get(n), ft, types, f'{path}.{n}')
        return
    else:
        raise IdlError(f'unknown type kind {kind}')
    if not ok:
        raise IdlError(f'{path}: {value!r} is not {kind}')


def check_reply(iface, method, parameters):
    check(parameters, iface['methods'][method][1], iface['types'], f'{method} reply')


def check_error(iface, error, parameters):
    name = error.rsplit('.', 1)[1]
    check(parameters, iface['errors'][name], iface['types'], f'{error}')
