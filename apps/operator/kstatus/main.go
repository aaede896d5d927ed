// Command kstatus prints what sigs.k8s.io/cli-utils' kstatus library (the one Flux, kpt and
// cli-utils use to decide whether an applied object is healthy) computes for Kubernetes objects.
//
// Input on stdin: a JSON array of objects. Output on stdout: one JSON line per object,
// {"name": ..., "status": "Current|InProgress|Failed|...", "message": ...}.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type result struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	// Kubernetes' JSON decoding: integral numbers become int64, as the API machinery expects.
	var objects []map[string]interface{}
	data, err := io.ReadAll(os.Stdin)
	if err == nil {
		err = utiljson.Unmarshal(data, &objects)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kstatus: reading a JSON array of objects from stdin: %v\n", err)
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	for _, object := range objects {
		u := &unstructured.Unstructured{Object: object}
		r, err := status.Compute(u)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: %s/%s: %v\n", u.GetKind(), u.GetName(), err)
			os.Exit(1)
		}
		if err := out.Encode(result{Name: u.GetKind() + "/" + u.GetName(), Status: r.Status.String(), Message: r.Message}); err != nil {
			os.Exit(1)
		}
	}
}
