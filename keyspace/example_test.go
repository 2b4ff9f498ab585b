package keyspace_test

import (
	"errors"
	"fmt"

	"github.com/lockgen/lockgen/keyspace"
)

func ExampleID() {
	fmt.Println(keyspace.ID("reports.daily_email"))
	// Output: -6078806957557529815
}

func ExampleParamID() {
	// billing.invoice(tenant_id int64) for tenant 42; in SQL:
	// SELECT pgadvisory.lock_id('billing.invoice', '42')
	fmt.Println(keyspace.ParamID("billing.invoice", keyspace.Int64Param(42)))
	// Without parameters ParamID is ID.
	fmt.Println(keyspace.ParamID("reports.daily_email") == keyspace.ID("reports.daily_email"))
	// Output:
	// 5523548972130093449
	// true
}

func ExampleCanonical() {
	for _, in := range []struct {
		t    keyspace.ParamType
		text string
	}{
		{keyspace.Int64, "+042"},
		{keyspace.UUID, "{6BA7B810-9DAD-11D1-80B4-00C04FD430C8}"},
		{keyspace.Bool, "T"},
		{keyspace.Int64, "4.2"},
	} {
		c, err := keyspace.Canonical(in.t, in.text)
		fmt.Printf("%s %q -> %q %v\n", in.t, in.text, c, err)
	}
	// Output:
	// int64 "+042" -> "42" <nil>
	// uuid "{6BA7B810-9DAD-11D1-80B4-00C04FD430C8}" -> "6ba7b810-9dad-11d1-80b4-00c04fd430c8" <nil>
	// bool "T" -> "true" <nil>
	// int64 "4.2" -> "" keyspace: "4.2" is not an int64
}

func ExampleValidateName() {
	fmt.Println(keyspace.ValidateName("billing.invoice"))
	err := keyspace.ValidateName("billing.Invoice")
	var ne *keyspace.NameError
	if errors.As(err, &ne) {
		fmt.Println(ne.Offset, ne.Reason)
	}
	fmt.Println(err)
	// Output:
	// <nil>
	// 8 uppercase letter: names are lowercase
	// keyspace: invalid lock name "billing.Invoice": uppercase letter: names are lowercase (at byte 8)
}

func ExampleSlotID() {
	// Slot 0 of the lock reports.daily_email limited to n holders; in SQL:
	// SELECT pgadvisory.slot_id(pgadvisory.lock_id('reports.daily_email'), 0)
	fmt.Println(keyspace.SlotID(keyspace.ID("reports.daily_email"), 0))
	// Output: -933250112286515960
}

func ExampleSlotKey() {
	fmt.Printf("%x\n", keyspace.SlotKey(1, 2))
	// Output: ff000000000000000100000002
}
