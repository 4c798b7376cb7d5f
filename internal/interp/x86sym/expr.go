// Package x86sym runs a short x86-64 function symbolically, to learn what
// it reads: the thread pointer offsets of libc's pthread_getspecific, the
// DTV walk of ld.so's __tls_get_addr, the key an interpreter passes to
// them. Values are linear expressions over the thread pointer, the
// function's argument, loads from memory and the results of calls, so the
// layout a function encodes is read off the function itself, not guessed.
//
// It follows one path: conditional branches whose outcome is unknown take
// the fast path (see Run), and it gives up on anything it cannot model,
// within a bounded number of instructions.
package x86sym

import (
	"slices"
	"strconv"
	"strings"
)

// TermKind is what a term of an expression stands for.
type TermKind uint8

// Kinds of terms.
const (
	// TP is the thread pointer: the FS segment base.
	TP TermKind = iota + 1
	// Arg is the function's symbolic argument (Machine.Arg).
	Arg
	// Load is the value at an address (Addr) in memory.
	Load
	// Call is the value a call returned (Target called with Addr as its
	// first argument).
	Call
)

// Term is one term of an expression: Coef times a value.
type Term struct {
	Coef int64
	Kind TermKind
	// Addr is a Load's address, or a Call's first argument.
	Addr *Expr
	// Target is a Call's callee.
	Target uint64
}

// Expr is a linear expression: Const plus its terms, kept sorted by key
// so that equal expressions compare equal.
type Expr struct {
	Const int64
	Terms []Term
}

// Const returns the expression of a constant.
func Const(c int64) *Expr { return &Expr{Const: c} }

// Single returns the expression of one term, with coefficient 1.
func Single(kind TermKind, addr *Expr, target uint64) *Expr {
	return &Expr{Terms: []Term{{Coef: 1, Kind: kind, Addr: addr, Target: target}}}
}

// IsConst reports whether e is a constant.
func (e *Expr) IsConst() bool { return e != nil && len(e.Terms) == 0 }

// key renders the term without its coefficient: equal keys add up.
func (t *Term) key() string {
	switch t.Kind {
	case TP:
		return "tp"
	case Arg:
		return "arg"
	case Load:
		return "[" + t.Addr.String() + "]"
	case Call:
		return "call" + strconv.FormatUint(t.Target, 16) + "(" + t.Addr.String() + ")"
	}
	return "?"
}

// String renders e, as "[tp+16]+792+16*arg".
func (e *Expr) String() string {
	if e == nil {
		return "unknown"
	}
	var b strings.Builder
	for i, t := range e.Terms {
		if i > 0 {
			b.WriteByte('+')
		}
		if t.Coef != 1 {
			b.WriteString(strconv.FormatInt(t.Coef, 10))
			b.WriteByte('*')
		}
		b.WriteString(t.key())
	}
	if e.Const != 0 || len(e.Terms) == 0 {
		if len(e.Terms) > 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.FormatInt(e.Const, 10))
	}
	return b.String()
}

// Equal reports whether a and b are the same expression.
func Equal(a, b *Expr) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.String() == b.String()
}

// Add returns a+b; nil (unknown) when either is.
func Add(a, b *Expr) *Expr {
	if a == nil || b == nil {
		return nil
	}
	out := &Expr{Const: a.Const + b.Const, Terms: slices.Clone(a.Terms)}
	for _, t := range b.Terms {
		out.addTerm(t)
	}
	return out
}

// Scale returns k*a; nil when a is unknown.
func Scale(a *Expr, k int64) *Expr {
	if a == nil {
		return nil
	}
	out := &Expr{Const: a.Const * k}
	for _, t := range a.Terms {
		t.Coef *= k
		out.addTerm(t)
	}
	return out
}

// AddConst returns a+c.
func AddConst(a *Expr, c int64) *Expr { return Add(a, Const(c)) }

func (e *Expr) addTerm(t Term) {
	if t.Coef == 0 {
		return
	}
	k := t.key()
	i, found := slices.BinarySearchFunc(e.Terms, k, func(x Term, k string) int { return strings.Compare(x.key(), k) })
	if found {
		e.Terms[i].Coef += t.Coef
		if e.Terms[i].Coef == 0 {
			e.Terms = slices.Delete(e.Terms, i, i+1)
		}
		return
	}
	e.Terms = slices.Insert(e.Terms, i, t)
}

// Split returns the coefficient of the term of kind (the first such
// term: a Load or Call alone) and e without it.
func (e *Expr) Split(kind TermKind) (coef int64, term *Term, rest *Expr) {
	if e == nil {
		return 0, nil, nil
	}
	rest = &Expr{Const: e.Const}
	for i := range e.Terms {
		t := e.Terms[i]
		if term == nil && t.Kind == kind {
			tt := t
			term, coef = &tt, t.Coef
			continue
		}
		rest.Terms = append(rest.Terms, t)
	}
	return coef, term, rest
}
