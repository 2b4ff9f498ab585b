package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	lockgenotel "github.com/lockgen/lockgen/otel"
)

// metricLines collects the metrics and prints one line per data point:
// name{attributes} value, sorted. Every point also carries lockgen.lock.id,
// left out here to keep the lines short.
func metricLines(ctx context.Context, reader *sdkmetric.ManualReader) ([]string, error) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return nil, fmt.Errorf("telemetry: collect metrics: %w", err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, attrs(dp.Attributes), dp.Value))
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d sum=%.3fs", m.Name, attrs(dp.Attributes), dp.Count, dp.Sum))
				}
			}
		}
	}
	slices.Sort(lines)
	return lines, nil
}

// attrs prints a set without lockgen.lock.id.
func attrs(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		if kv.Key == lockgenotel.LockIDKey {
			continue
		}
		parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
	}
	return strings.Join(parts, ",")
}

// spanTree prints the spans as a tree: each span under its parent, siblings
// in the order they started, with a lock span's outcome, error.type, status
// and events.
func spanTree(spans []sdktrace.ReadOnlySpan) []string {
	children := map[string][]sdktrace.ReadOnlySpan{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID().String()] = true
	}
	for _, s := range spans {
		parent := ""
		if s.Parent().IsValid() && ids[s.Parent().SpanID().String()] {
			parent = s.Parent().SpanID().String()
		}
		children[parent] = append(children[parent], s)
	}
	var lines []string
	var walk func(parent, indent string)
	walk = func(parent, indent string) {
		kids := children[parent]
		slices.SortFunc(kids, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
		for _, s := range kids {
			lines = append(lines, indent+describe(s))
			walk(s.SpanContext().SpanID().String(), indent+"  ")
		}
	}
	walk("", "")
	return lines
}

// describe is one span's line.
func describe(s sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	b.WriteString(s.Name())
	var outcome, errType string
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case lockgenotel.OutcomeKey:
			outcome = kv.Value.AsString()
		case lockgenotel.ErrorTypeKey:
			errType = kv.Value.AsString()
		}
	}
	if outcome != "" || errType != "" {
		fmt.Fprintf(&b, " [outcome=%s", outcome)
		if errType != "" {
			fmt.Fprintf(&b, " error.type=%s", errType)
		}
		fmt.Fprintf(&b, " status=%s]", s.Status().Code)
	}
	if events := s.Events(); len(events) > 0 {
		names := make([]string, len(events))
		for i, e := range events {
			names[i] = e.Name
		}
		b.WriteString(" events: " + strings.Join(names, ", "))
	}
	return b.String()
}
