package pgadvisory

import (
	"fmt"
	"reflect"
)

func checkExecutor[D any](tx reflect.Type, nilRepo, nilFn bool) error {
	switch {
	case nilRepo:
		return fmt.Errorf("nil newRepo")
	case nilFn:
		return fmt.Errorf("nil fn")
	}
	d := reflect.TypeFor[D]()
	if tx == d || (d.Kind() == reflect.Interface && tx.Implements(d)) {
		return nil
	}
	return fmt.Errorf("repository executor type %v is not implemented by %v", d, tx)
}
