package keyspace_test

import (
	"fmt"

	"github.com/lockgen/lockgen/keyspace"
)

// The typed helpers render a parameter's canonical text, the form that both
// ParamID and the SQL twin hash.
func ExampleInt64Param() {
	fmt.Println(keyspace.Int64Param(-42))
	fmt.Println(keyspace.BoolParam(true))
	fmt.Println(keyspace.StringParam("acme"))
	fmt.Println(keyspace.UUIDParam([16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}))
	// Output:
	// -42
	// true
	// acme
	// 6ba7b810-9dad-11d1-80b4-00c04fd430c8
}

// BoolParam renders a bool parameter as "true" or "false".
func ExampleBoolParam() {
	fmt.Println(keyspace.ParamID("feature.flag", keyspace.BoolParam(true)))
	// Output:
	// 4696501794800460692
}

// StringParam renders a string parameter as itself.
func ExampleStringParam() {
	fmt.Println(keyspace.ParamID("exports.customer", keyspace.StringParam("acme"), keyspace.StringParam("2026-12-02")))
	// Output:
	// 7965558807809818550
}

// UUIDParam accepts any 16-byte UUID type, such as github.com/google/uuid.UUID.
func ExampleUUIDParam() {
	type UUID [16]byte // stands in for uuid.UUID
	tenant := UUID{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	fmt.Println(keyspace.ParamID("tenants.sync", keyspace.UUIDParam(tenant)))
	// Output:
	// 5745758254410959799
}

// Key shows the bytes that are hashed: the name, then per parameter a zero
// byte, its length as 4 big-endian bytes, and its canonical text.
func ExampleKey() {
	fmt.Printf("%q\n", keyspace.Key("billing.invoice", keyspace.Int64Param(42)))
	// Output:
	// "billing.invoice\x00\x00\x00\x00\x0242"
}

// ParseParamType reads a declared parameter type.
func ExampleParseParamType() {
	t, err := keyspace.ParseParamType("uuid")
	fmt.Println(t, err)
	_, err = keyspace.ParseParamType("float")
	fmt.Println(err)
	// Output:
	// uuid <nil>
	// keyspace: unknown parameter type "float" (want int64, string, uuid or bool)
}
