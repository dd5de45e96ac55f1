package control

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"dolly/dolly/stream"
)

// protocolDoc is the protocol's description, which must list every control
// message this package defines.
const protocolDoc = "../../docs/protocol.md"

// messageTableHeader opens the message table of protocolDoc.
const messageTableHeader = "| type | direction | body field | meaning |"

// noBody is what the body field column holds for a message without a body.
const noBody = "—"

// docMessage is one row of the message table.
type docMessage struct {
	line      int
	typ       MsgType
	direction string
	body      string // a JSON field of Message, or noBody
}

// TestProtocolDoc keeps docs/protocol.md true to the code: its message
// table names every message type exactly once, with the body field that
// validation asks for, and nothing else; the protocol version it states is
// the code's.
func TestProtocolDoc(t *testing.T) {
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	rows := parseMessageTable(t, string(doc))
	defined := definedMsgTypes(t)

	seen := map[MsgType]int{}
	for _, r := range rows {
		if prev, ok := seen[r.typ]; ok {
			t.Errorf("%s:%d: message %q is listed again (first on line %d)", protocolDoc, r.line, r.typ, prev)
			continue
		}
		seen[r.typ] = r.line
		if !defined[r.typ] {
			t.Errorf("%s:%d: message %q is not a MsgType of package control", protocolDoc, r.line, r.typ)
			continue
		}
		if r.direction != "node → server" && r.direction != "server → node" {
			t.Errorf("%s:%d: message %q: direction %q, want \"node → server\" or \"server → node\"", protocolDoc, r.line, r.typ, r.direction)
		}
		checkBody(t, r)
	}
	for _, typ := range slices.Sorted(maps.Keys(defined)) {
		if _, ok := seen[typ]; !ok {
			t.Errorf("%s: message %q is missing from the message table", protocolDoc, typ)
		}
	}

	checkVersion(t, string(doc))
}

// parseMessageTable returns the rows of the table that opens with
// messageTableHeader.
func parseMessageTable(t *testing.T, doc string) []docMessage {
	t.Helper()
	lines := strings.Split(doc, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == messageTableHeader {
			if start >= 0 {
				t.Fatalf("%s: two message tables, on lines %d and %d", protocolDoc, start+1, i+1)
			}
			start = i
		}
	}
	if start < 0 {
		t.Fatalf("%s: no message table (a line %q)", protocolDoc, messageTableHeader)
	}
	if start+1 >= len(lines) || !regexp.MustCompile(`^\|(\s*:?-+:?\s*\|){4}$`).MatchString(strings.TrimSpace(lines[start+1])) {
		t.Fatalf("%s:%d: the message table's header is not followed by |---|---|---|---|", protocolDoc, start+2)
	}
	code := regexp.MustCompile("^`([^`]+)`$")
	var rows []docMessage
	for i := start + 2; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) != 4 {
			t.Errorf("%s:%d: %d cells, want 4 (type, direction, body field, meaning)", protocolDoc, i+1, len(cells))
			continue
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		m := code.FindStringSubmatch(cells[0])
		if m == nil {
			t.Errorf("%s:%d: type %q is not written as `type`", protocolDoc, i+1, cells[0])
			continue
		}
		body := cells[2]
		if body != noBody {
			b := code.FindStringSubmatch(body)
			if b == nil {
				t.Errorf("%s:%d: body field %q is neither `field` nor %s", protocolDoc, i+1, body, noBody)
				continue
			}
			body = b[1]
		}
		rows = append(rows, docMessage{line: i + 1, typ: MsgType(m[1]), direction: cells[1], body: body})
	}
	if len(rows) == 0 {
		t.Fatalf("%s:%d: the message table has no rows", protocolDoc, start+1)
	}
	return rows
}

// definedMsgTypes reads the package's source for its constants of type
// MsgType, so that a message added to the code without a row in the
// table fails the test.
func definedMsgTypes(t *testing.T) map[MsgType]bool {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	types := map[MsgType]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				typed := false
				if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "MsgType" {
					typed = true
				}
				for i, v := range vs.Values {
					lit := v
					// MsgType("x") counts as well as x of type MsgType.
					if call, ok := v.(*ast.CallExpr); ok && len(call.Args) == 1 {
						if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "MsgType" {
							lit, typed = call.Args[0], true
						}
					}
					if !typed {
						continue
					}
					bl, ok := lit.(*ast.BasicLit)
					if !ok || bl.Kind != token.STRING {
						t.Fatalf("%s: MsgType constant %s is not a string literal", fset.Position(v.Pos()), vs.Names[i].Name)
					}
					val, err := strconv.Unquote(bl.Value)
					if err != nil {
						t.Fatal(err)
					}
					types[MsgType(val)] = true
				}
			}
		}
	}
	if !types[MsgHello] || !types[MsgPing] {
		t.Fatalf("found %d MsgType constants in the source, and not hello and ping: the source scan is broken", len(types))
	}
	return types
}

// messageFields maps Message's JSON field names to its fields.
func messageFields() map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	rt := reflect.TypeFor[Message]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = f
		}
	}
	return fields
}

// checkBody decodes a message of r's type with exactly the documented body
// as a node or the server would read it: it must be accepted. A body that
// is a JSON object must also be required: the message without it must be
// refused. A message documented without a body must be accepted bare.
func checkBody(t *testing.T, r docMessage) {
	t.Helper()
	msg := map[string]any{"type": r.typ}
	if r.body != noBody {
		f, ok := messageFields()[r.body]
		switch {
		case !ok || r.body == "type":
			t.Errorf("%s:%d: message %q: %q is not a body field of Message", protocolDoc, r.line, r.typ, r.body)
			return
		case f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct:
			msg[r.body] = reflect.New(f.Type.Elem()).Interface()
		case f.Type.Kind() == reflect.String:
			msg[r.body] = "as documented"
		default:
			t.Errorf("%s:%d: message %q: body field %q is a %s, which this test cannot fill in", protocolDoc, r.line, r.typ, r.body, f.Type)
			return
		}
		got, err := decode(t, msg)
		if err != nil {
			t.Errorf("%s:%d: message %q with its documented body %q is refused: %v", protocolDoc, r.line, r.typ, r.body, err)
			return
		}
		if v := reflect.ValueOf(got).FieldByIndex(f.Index); v.IsZero() {
			t.Errorf("%s:%d: message %q: body %q is empty after decoding", protocolDoc, r.line, r.typ, r.body)
		}
		if f.Type.Kind() != reflect.Pointer {
			return
		}
		if _, err := decode(t, map[string]any{"type": r.typ}); err == nil {
			t.Errorf("%s:%d: message %q: documented body %q, but the message is accepted without it", protocolDoc, r.line, r.typ, r.body)
		}
		return
	}
	if _, err := decode(t, msg); err != nil {
		t.Errorf("%s:%d: message %q is documented without a body, but refused without one: %v", protocolDoc, r.line, r.typ, err)
	}
}

// decode frames msg as the control connection carries it (a 4-byte
// little-endian length, then the JSON) and reads it back.
func decode(t *testing.T, msg map[string]any) (Message, error) {
	t.Helper()
	body, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	frame := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
	return ReadMessage(bytes.NewReader(append(frame, body...)))
}

// checkVersion compares the protocol version the document states with the
// code's.
func checkVersion(t *testing.T, doc string) {
	t.Helper()
	stated := regexp.MustCompile(`(?m)^Protocol version: (\d+)\s*$`).FindAllStringSubmatch(doc, -1)
	if len(stated) != 1 {
		t.Fatalf("%s: %d lines \"Protocol version: N\", want 1", protocolDoc, len(stated))
	}
	if v, _ := strconv.Atoi(stated[0][1]); v != stream.Version {
		t.Errorf("%s states protocol version %d; the code speaks %d", protocolDoc, v, stream.Version)
	}
	// Every other mention, such as the header's version field, agrees.
	mention := regexp.MustCompile("(?i)protocol version \\((\\d+)\\)|`version` \\((\\d+)\\)")
	for _, m := range mention.FindAllStringSubmatch(doc, -1) {
		n := m[1] + m[2]
		if v, _ := strconv.Atoi(n); v != stream.Version {
			t.Errorf("%s: %q says version %s; the code speaks %d", protocolDoc, m[0], n, stream.Version)
		}
	}
}

// TestProtocolDocLayouts checks the byte layouts of docs/protocol.md: each
// "| offset | size | field |" table runs without gaps from offset 0, the
// first (the stream header) to stream.StreamHeaderLen bytes and the second
// (a frame's header) to stream.FrameHeaderLen.
func TestProtocolDocLayouts(t *testing.T) {
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	var totals []int
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "| offset | size | field |" {
			continue
		}
		off := 0
		for i += 2; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
			cells := strings.Split(strings.Trim(strings.TrimSpace(lines[i]), "|"), "|")
			if len(cells) != 3 {
				t.Errorf("%s:%d: %d cells, want | offset | size | field |", protocolDoc, i+1, len(cells))
				continue
			}
			o, err1 := strconv.Atoi(strings.TrimSpace(cells[0]))
			n, err2 := strconv.Atoi(strings.TrimSpace(cells[1]))
			if err1 != nil || err2 != nil {
				t.Errorf("%s:%d: offset and size are not numbers", protocolDoc, i+1)
				continue
			}
			if o != off {
				t.Errorf("%s:%d: offset %d, but the fields before end at %d", protocolDoc, i+1, o, off)
			}
			off = o + n
		}
		totals = append(totals, off)
	}
	want := []int{stream.StreamHeaderLen, stream.FrameHeaderLen}
	if !slices.Equal(totals, want) {
		t.Errorf("%s: layout tables of %v bytes, want %v (the stream header, a frame header)", protocolDoc, totals, want)
	}
	if !strings.Contains(string(doc), "### Stream header ("+strconv.Itoa(stream.StreamHeaderLen)+" bytes)") {
		t.Errorf("%s: no heading \"### Stream header (%d bytes)\"", protocolDoc, stream.StreamHeaderLen)
	}
}
