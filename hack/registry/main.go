// Command mlms-registry is the dev cluster's OCI registry: go-containerregistry's
// pkg/registry (an OCI distribution server) on plain HTTP, with everything pushed kept on
// disk so a restarted registry still serves it.
//
//   - Blobs live in <root>/blobs/sha256/<hex>, written to a temporary file and renamed
//     only after the registry verified the digest; a blob's size is its file's size.
//   - pkg/registry keeps manifests in memory, so every manifest PUT that succeeds is also
//     written to <root>/manifests/<escaped repository>/<reference> (its media type in a
//     .type file beside it) and put again into a new process before it listens.
//   - Each request is logged as one JSON line on stdout (method, path, status, bytes, the
//     client's address and User-Agent): the dev cluster's tests read it to see which client
//     pulled what.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// diskBlobs stores blobs by digest; Stat trusts the file size because a file appears
// only after its content was verified against its name.
type diskBlobs struct{ dir string }

func (d diskBlobs) path(h v1.Hash) string { return filepath.Join(d.dir, h.Algorithm, h.Hex) }

func (d diskBlobs) Stat(_ context.Context, _ string, h v1.Hash) (int64, error) {
	info, err := os.Stat(d.path(h))
	if errors.Is(err, os.ErrNotExist) {
		return 0, registry.ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}

func (d diskBlobs) Get(_ context.Context, _ string, h v1.Hash) (io.ReadCloser, error) {
	f, err := os.Open(d.path(h))
	if errors.Is(err, os.ErrNotExist) {
		return nil, registry.ErrNotFound
	}
	return f, err
}

func (d diskBlobs) Put(_ context.Context, _ string, h v1.Hash, rc io.ReadCloser) error {
	defer rc.Close()
	if err := os.MkdirAll(filepath.Join(d.dir, h.Algorithm), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Join(d.dir, h.Algorithm), ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := io.Copy(tmp, rc); err != nil {
		tmp.Close()
		return err // a digest or size mismatch surfaces here, before the rename
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), d.path(h))
}

// manifestStore mirrors successful manifest PUTs and DELETEs onto disk.
type manifestStore struct{ dir string }

// split returns (repository, reference) of /v2/<repository>/manifests/<reference>.
func split(p string) (string, string, bool) {
	elems := strings.Split(strings.TrimPrefix(p, "/v2/"), "/")
	if len(elems) < 3 || elems[len(elems)-2] != "manifests" {
		return "", "", false
	}
	return strings.Join(elems[:len(elems)-2], "/"), elems[len(elems)-1], true
}

func (m manifestStore) file(repo, ref string) string {
	return filepath.Join(m.dir, url.PathEscape(repo), url.PathEscape(ref))
}

func (m manifestStore) save(repo, ref, mediaType string, body []byte) error {
	path := m.file(repo, ref)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	for name, data := range map[string][]byte{path + ".type": []byte(mediaType), path: body} {
		tmp := name + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, name); err != nil {
			return err
		}
	}
	return nil
}

func (m manifestStore) remove(repo, ref string) {
	os.Remove(m.file(repo, ref))
	os.Remove(m.file(repo, ref) + ".type")
}

// replay puts every stored manifest into h. An index is refused until the manifests it
// names are there, so rounds repeat while any manifest goes in.
func (m manifestStore) replay(h http.Handler) (int, error) {
	type stored struct{ repo, ref, mediaType, path string }
	var todo []stored
	repos, err := os.ReadDir(m.dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	for _, r := range repos {
		repo, err := url.PathUnescape(r.Name())
		if err != nil || !r.IsDir() {
			continue
		}
		refs, err := os.ReadDir(filepath.Join(m.dir, r.Name()))
		if err != nil {
			return 0, err
		}
		for _, f := range refs {
			name := f.Name()
			if strings.HasSuffix(name, ".type") || strings.HasSuffix(name, ".tmp") {
				continue
			}
			ref, err := url.PathUnescape(name)
			if err != nil {
				continue
			}
			path := filepath.Join(m.dir, r.Name(), name)
			mediaType, err := os.ReadFile(path + ".type")
			if err != nil {
				continue
			}
			todo = append(todo, stored{repo, ref, string(mediaType), path})
		}
	}
	done := 0
	for len(todo) > 0 {
		var again []stored
		for _, s := range todo {
			body, err := os.ReadFile(s.path)
			if err != nil {
				return done, err
			}
			req := httptest.NewRequest(http.MethodPut, "/v2/"+s.repo+"/manifests/"+s.ref, bytes.NewReader(body))
			req.Header.Set("Content-Type", s.mediaType)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code == http.StatusCreated {
				done++
			} else {
				again = append(again, s)
			}
		}
		if len(again) == len(todo) {
			return done, fmt.Errorf("%d stored manifest(s) refused, first %s/%s", len(again), again[0].repo, again[0].ref)
		}
		todo = again
	}
	return done, nil
}

// recorder captures the status and size of a response.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

type entry struct {
	Time    string  `json:"time"`
	Method  string  `json:"method"`
	Path    string  `json:"path"`
	Status  int     `json:"status"`
	Bytes   int64   `json:"bytes"`
	Remote  string  `json:"remote"`
	Agent   string  `json:"agent"`
	Seconds float64 `json:"seconds"`
}

// persist wraps the registry: manifest writes reach the disk, every request the log.
func persist(next http.Handler, store manifestStore, out *json.Encoder) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		started := time.Now()
		rec := &recorder{ResponseWriter: w}
		repo, ref, isManifest := split(req.URL.Path)
		var body []byte
		if isManifest && req.Method == http.MethodPut {
			var err error
			body, err = io.ReadAll(io.LimitReader(req.Body, 16<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(rec, req)
		switch {
		case isManifest && req.Method == http.MethodPut && rec.status == http.StatusCreated:
			mediaType := req.Header.Get("Content-Type")
			digest := rec.Header().Get("Docker-Content-Digest")
			for _, r := range []string{ref, digest} {
				if r == "" {
					continue
				}
				if err := store.save(repo, r, mediaType, body); err != nil {
					log.Printf("keeping manifest %s/%s: %v", repo, r, err)
				}
			}
		case isManifest && req.Method == http.MethodDelete && rec.status == http.StatusAccepted:
			store.remove(repo, ref)
		}
		out.Encode(entry{
			Time: started.UTC().Format(time.RFC3339Nano), Method: req.Method, Path: req.URL.Path,
			Status: rec.status, Bytes: rec.bytes, Remote: req.RemoteAddr, Agent: req.UserAgent(),
			Seconds: time.Since(started).Seconds(),
		})
	})
}

func main() {
	address := flag.String("address", "127.0.0.1:0", "host:port to listen on")
	root := flag.String("root", "", "directory that keeps blobs and manifests (required)")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.LUTC)
	if *root == "" {
		log.Fatal("--root is required")
	}
	store := manifestStore{dir: filepath.Join(*root, "manifests")}
	quiet := log.New(io.Discard, "", 0) // requests are logged as JSON by persist
	reg := registry.New(registry.WithBlobHandler(diskBlobs{dir: filepath.Join(*root, "blobs")}), registry.Logger(quiet))
	restored, err := store.replay(reg)
	if err != nil {
		log.Fatalf("restoring manifests from %s: %v", store.dir, err)
	}
	listener, err := net.Listen("tcp", *address)
	if err != nil {
		log.Fatal(err)
	}
	server := &http.Server{
		Handler:           persist(reg, store, json.NewEncoder(os.Stdout)),
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Printf("serving on %s from %s (%d manifest reference(s) restored)", listener.Addr(), *root, restored)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		server.Shutdown(shutdown)
	}()
	if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
