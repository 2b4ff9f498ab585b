package decl

import (
	"go/token"
	"strings"
)

// initialisms are words written in upper case inside Go identifiers
// (golint's list), so "tenant_id" becomes tenantID and "api.sync" APISync.
// Changing this list renames generated identifiers: only ever add to it
// with a changelog entry.
var initialisms = map[string]bool{
	"acl": true, "api": true, "ascii": true, "cpu": true, "css": true, "dns": true,
	"eof": true, "guid": true, "html": true, "http": true, "https": true, "id": true,
	"ip": true, "json": true, "lhs": true, "qps": true, "ram": true, "rhs": true,
	"rpc": true, "sla": true, "smtp": true, "sql": true, "ssh": true, "tcp": true,
	"tls": true, "ttl": true, "udp": true, "ui": true, "uid": true, "uuid": true,
	"uri": true, "url": true, "utf8": true, "vm": true, "xml": true, "xmpp": true,
	"xsrf": true, "xss": true,
}

// reservedParamNames are identifiers the generated constructors use inside
// their bodies; a parameter with one of these names would shadow it.
var reservedParamNames = map[string]bool{"keyspace": true, "pgadvisory": true, "time": true}

// GoName returns the exported Go identifier of a valid lock name: its dotted
// and underscored words in UpperCamel case, initialisms in upper case, e.g.
// "reports.daily_email" → ReportsDailyEmail, "billing.invoice_id" →
// BillingInvoiceID. Different names can map to the same identifier
// ("a.b_c" and "a_b.c" both give ABC); Check reports that.
func GoName(name string) string {
	var b strings.Builder
	for _, w := range words(name) {
		b.WriteString(title(w))
	}
	return b.String()
}

// ParamGoName returns the lowerCamel Go identifier of a lower_snake parameter
// name, e.g. "tenant_id" → tenantID, "id" → id.
func ParamGoName(name string) string {
	var b strings.Builder
	for i, w := range words(name) {
		if i == 0 {
			b.WriteString(w)
			continue
		}
		b.WriteString(title(w))
	}
	return b.String()
}

func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '_' })
}

func title(w string) string {
	if initialisms[w] {
		return strings.ToUpper(w)
	}
	if w == "" || w[0] < 'a' || w[0] > 'z' {
		return w
	}
	return string(w[0]-'a'+'A') + w[1:]
}

// validParamName reports whether s is lower_snake: [a-z][a-z0-9]* words
// joined by single underscores. It returns the byte offset of the first
// problem and a reason otherwise.
func validParamName(s string) (int, string, bool) {
	if s == "" {
		return 0, "parameter name is empty", false
	}
	wordStart := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z':
			wordStart = false
		case c >= '0' && c <= '9':
			if wordStart {
				return i, "each word of a parameter name must start with a lowercase letter", false
			}
		case c == '_':
			if wordStart {
				return i, "parameter names are lower_snake: no leading or doubled underscores", false
			}
			wordStart = true
		default:
			return i, "parameter names are lower_snake: use [a-z0-9_]", false
		}
	}
	if wordStart {
		return len(s) - 1, "parameter names are lower_snake: no trailing underscore", false
	}
	return 0, "", true
}

// paramGoNameProblem explains why a parameter's Go name cannot be used, or
// returns "".
func paramGoNameProblem(goName string) string {
	switch {
	case token.IsKeyword(goName):
		return "is a Go keyword"
	case reservedParamNames[goName]:
		return "would hide the package " + goName + " that the generated code uses"
	case !token.IsIdentifier(goName):
		return "is not a Go identifier"
	}
	return ""
}
