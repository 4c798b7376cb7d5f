package hotspot

import (
	"errors"
	"strings"
)

// A Java method is named as java.lang.reflect.Method's toString names it,
// without modifiers: its return type, class and name, and its parameter
// types, all with dots ("long JavaChain.chainLeaf(long)",
// "void JavaChain.main(java.lang.String[])"). The OpenTelemetry eBPF
// profiler names them the same way.

var errDescriptor = errors.New("malformed method descriptor")

// primitives are the field descriptors of Java's primitive types.
var primitives = map[byte]string{
	'B': "byte", 'C': "char", 'D': "double", 'F': "float", 'I': "int",
	'J': "long", 'S': "short", 'Z': "boolean", 'V': "void",
}

// javaName renders a class's internal name (java/lang/String) as Java
// writes it.
func javaName(internal string) string { return strings.ReplaceAll(internal, "/", ".") }

// fieldType renders the field descriptor at the start of d and returns
// the rest.
func fieldType(d string, sb *strings.Builder) (string, error) {
	dims := 0
	for dims < len(d) && d[dims] == '[' {
		dims++
	}
	// The JVM allows at most 255 dimensions.
	if dims > 255 || dims == len(d) {
		return "", errDescriptor
	}
	d = d[dims:]
	switch {
	case d[0] == 'L':
		end := strings.IndexByte(d, ';')
		if end < 2 {
			return "", errDescriptor
		}
		sb.WriteString(javaName(d[1:end]))
		d = d[end+1:]
	case primitives[d[0]] != "" && d[0] != 'V' || d[0] == 'V' && dims == 0:
		sb.WriteString(primitives[d[0]])
		d = d[1:]
	default:
		return "", errDescriptor
	}
	for range dims {
		sb.WriteString("[]")
	}
	return d, nil
}

// methodName renders a method of class klass (internal name) named name
// with descriptor desc ("(J)J").
func methodName(klass, name, desc string) (string, error) {
	if len(desc) < 3 || desc[0] != '(' {
		return "", errDescriptor
	}
	end := strings.IndexByte(desc, ')')
	if end < 0 {
		return "", errDescriptor
	}
	var sb strings.Builder
	sb.Grow(len(klass) + len(name) + 2*len(desc))
	rest, err := fieldType(desc[end+1:], &sb)
	if err != nil || rest != "" {
		return "", errDescriptor
	}
	sb.WriteByte(' ')
	sb.WriteString(javaName(klass))
	sb.WriteByte('.')
	sb.WriteString(name)
	sb.WriteByte('(')
	params := desc[1:end]
	for first := true; params != ""; first = false {
		if !first {
			sb.WriteString(", ")
		}
		if params[0] == 'V' {
			return "", errDescriptor
		}
		if params, err = fieldType(params, &sb); err != nil {
			return "", err
		}
	}
	sb.WriteByte(')')
	return sb.String(), nil
}
