package tooljail

import (
	"reflect"
	"regexp"
	"testing"
)

var toolUseIDPattern = regexp.MustCompile(`^toolu_[0-9a-f]{24}$`)

func TestNewToolUseID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewToolUseID()
		if !toolUseIDPattern.MatchString(id) {
			t.Fatalf("%q is not toolu_ and 24 hex digits", id)
		}
		if seen[id] {
			t.Fatalf("%q came twice", id)
		}
		seen[id] = true
	}
}

func TestParseToolUse(t *testing.T) {
	use, err := ParseToolUse([]byte(`{"type": "tool_use", "id": "toolu_01A", "name": "Read",
		"input": {"file_path": "/w/a.txt", "limit": 10}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := ToolUse{ID: "toolu_01A", Name: "Read", Input: map[string]any{"file_path": "/w/a.txt", "limit": float64(10)}}
	if !reflect.DeepEqual(use, want) {
		t.Errorf("got %+v, want %+v", use, want)
	}
	for _, bad := range []string{`{"type": "text", "text": "hi"}`, `{"type": "tool_use", "id": "x"}`, `[1]`} {
		if _, err := ParseToolUse([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
