package audit

import "testing"

// BenchmarkEncode is what a producer pays per Emit to encode its event:
// the realistic mix of benchEvents, in each stream flavor.
func BenchmarkEncode(b *testing.B) {
	evs := benchEvents()
	b.Run("airlock", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, err := encode(evs[i%len(evs)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name string
		enc  encoder
	}{{"airlock+node", encoder{node: "node-a.example.test"}}, {"ocsf", encoder{node: "node-a.example.test", ocsf: true, version: "1.0"}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				if _, err := c.enc.encode(evs[i%len(evs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
