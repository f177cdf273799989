package audit

import "context"

type principalKey struct{}

// WithPrincipal returns ctx carrying the control API principal on whose
// request the work in ctx is done; lifecycle, exec and file records made
// for it name the principal.
func WithPrincipal(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, principalKey{}, name)
}

// PrincipalFrom returns the principal WithPrincipal put in ctx ("" when
// none: the appliance acting on its own, e.g. a lifetime that ran out).
func PrincipalFrom(ctx context.Context) string {
	s, _ := ctx.Value(principalKey{}).(string)
	return s
}
