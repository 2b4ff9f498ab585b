package pgadvisory_test

import (
	"context"
	"fmt"

	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Register records declared names in the database, so that lockgen status
// and the pgadvisory.status view show locks by name. Generated code exposes
// the declarations as Declared; every replica may call Register at start-up.
func ExampleRegister() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)

	name := "examples.pgadvisory.register"
	declared := []pgadvisory.Declared{
		{Name: name, Doc: "An example lock.", ID: keyspace.ID(name)},
		{Name: "examples.pgadvisory.register_tenant", Params: []pgadvisory.DeclaredParam{{Name: "tenant_id", Type: keyspace.Int64}}},
	}
	if err := pgadvisory.Register(ctx, db, declared); err != nil {
		fmt.Println(err)
		return
	}
	var registered string
	err := db.QueryRowContext(ctx, "SELECT name FROM pgadvisory.registry WHERE lock_id = $1", keyspace.ID(name)).Scan(&registered)
	fmt.Println(registered, err)
	// Output:
	// examples.pgadvisory.register <nil>
}

// RegisterInstance names one instance of a parameterized lock (here tenant
// 42), so that status shows "tenant_id=42" instead of a raw key. The
// declaration must have been registered first.
func ExampleRegisterInstance() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)

	name := "examples.pgadvisory.register_instance"
	declared := []pgadvisory.Declared{{Name: name, Params: []pgadvisory.DeclaredParam{{Name: "tenant_id", Type: keyspace.Int64}}}}
	if err := pgadvisory.Register(ctx, db, declared); err != nil {
		fmt.Println(err)
		return
	}
	tenant := keyspace.Int64Param(42)
	lock := pgadvisory.Lock{Name: name, ID: keyspace.ParamID(name, tenant)}
	if err := pgadvisory.RegisterInstance(ctx, db, lock, tenant); err != nil {
		fmt.Println(err)
		return
	}
	var params string
	err := db.QueryRowContext(ctx, "SELECT params::text FROM pgadvisory.registry WHERE lock_id = $1", lock.ID).Scan(&params)
	fmt.Println(params, err)
	// Output:
	// {"tenant_id": "42"} <nil>
}
