// Package delimited reads and writes varint-delimited protobuf streams, the
// `.binpb` trace format `omni-grpc convert` writes: each record is its
// length as a base-128 varint followed by that many bytes of OmniMessage.
//
// protobuf-go 1.28 (Debian 12) has no protodelim package, hence this reader.
package delimited

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// MaxRecord bounds one record so a corrupt length cannot allocate gigabytes.
const MaxRecord = 64 << 20

// Reader yields one message per Next call.
type Reader struct {
	r      *bufio.Reader
	record int
}

// NewReader wraps r (buffered internally).
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReader(r)}
}

// Next decodes the next record into m. It returns io.EOF at a clean end of
// stream and a descriptive error for a truncated or oversized record. A
// record stored compressed (an OmniMessage holding only zlib_record, the
// zlib stream of the record's bytes, or a 0x00 byte and that stream) is
// inflated and decoded as the record.
func (d *Reader) Next(m proto.Message) error {
	size, err := d.readVarint()
	if err != nil {
		return err
	}
	d.record++
	if size > MaxRecord {
		return fmt.Errorf("record %d: length %d exceeds %d bytes", d.record, size, MaxRecord)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(d.r, buf); err != nil {
		return fmt.Errorf("record %d: truncated (want %d bytes): %w", d.record, size, err)
	}
	// snippet:start go-marked
	// A record of tool definitions is stored compressed by default: a 0x00
	// byte (field number 0, which proto.Unmarshal refuses), then the zlib
	// stream of the record's bytes.
	if len(buf) > 0 && buf[0] == 0 {
		record, err := inflate(buf[1:])
		if err != nil {
			return fmt.Errorf("record %d: the marked record: %w", d.record, err)
		}
		buf = record
	}
	// snippet:end go-marked
	if err := proto.Unmarshal(buf, m); err != nil {
		return fmt.Errorf("record %d: %w", d.record, err)
	}
	// snippet:start go-record
	if c, ok := m.(interface{ GetZlibRecord() []byte }); ok && len(c.GetZlibRecord()) > 0 {
		record, err := inflate(c.GetZlibRecord())
		if err != nil {
			return fmt.Errorf("record %d: zlib_record: %w", d.record, err)
		}
		if err := proto.Unmarshal(record, m); err != nil {
			return fmt.Errorf("record %d: the inflated record: %w", d.record, err)
		}
	}
	// snippet:end go-record
	return nil
}

// inflate reads one zlib stream, refusing one that inflates past MaxRecord.
func inflate(packed []byte) ([]byte, error) {
	zr, err := zlib.NewReader(bytes.NewReader(packed))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	record, err := io.ReadAll(io.LimitReader(zr, MaxRecord+1))
	if err != nil {
		return nil, err
	}
	if len(record) > MaxRecord {
		return nil, fmt.Errorf("inflates past %d bytes", MaxRecord)
	}
	return record, nil
}

func (d *Reader) readVarint() (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		b, err := d.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && shift == 0 {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("record %d: truncated length prefix: %w", d.record+1, io.ErrUnexpectedEOF)
		}
		if shift >= 64 {
			return 0, fmt.Errorf("record %d: length prefix overflows 64 bits", d.record+1)
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
}

// Write appends m to w as one delimited record.
func Write(w io.Writer, m proto.Message) error {
	body, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	record := protowire.AppendVarint(make([]byte, 0, len(body)+10), uint64(len(body)))
	_, err = w.Write(append(record, body...))
	return err
}
