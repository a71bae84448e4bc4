/*
 * spm_shim.cc - the one C++ file: spm.h's calls on libsentencepiece's
 * SentencePieceProcessor. Nothing here throws past the C interface: the library reports by
 * util::Status, an allocation that fails is caught and said as -ENOMEM, and anything else
 * it throws while loading (its file reader throws on a directory) as -EINVAL.
 */
#include "tok/spm.h"

#include <errno.h>
#include <stdio.h>

#include <exception>
#include <memory>
#include <new>
#include <sentencepiece_processor.h>
#include <string>
#include <vector>

struct spm_model {
	sentencepiece::SentencePieceProcessor sp;
};

extern "C" int spm_load(const char *path, struct spm_model **out, char *err, size_t errlen)
{
	try {
		std::unique_ptr<spm_model> m(new spm_model);
		auto st = m->sp.Load(path);
		if (!st.ok()) {
			snprintf(err, errlen, "%s", st.ToString().c_str());
			return -EINVAL;
		}
		if (m->sp.GetPieceSize() <= 0) {
			snprintf(err, errlen, "no pieces");
			return -EINVAL;
		}
		*out = m.release();
		return 0;
	} catch (const std::bad_alloc &) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	} catch (const std::exception &e) { /* the library reading a file it cannot */
		snprintf(err, errlen, "%s", e.what());
		return -EINVAL;
	}
}

extern "C" void spm_free(struct spm_model *m)
{
	delete m;
}

extern "C" int spm_encode(const struct spm_model *m, const char *text, size_t n, uint32_t *ids,
			  size_t cap, size_t *nids)
{
	try {
		std::vector<int> v;
		if (!m->sp.Encode(std::string(text, n), &v).ok())
			return -EINVAL;
		*nids = v.size();
		if (v.size() > cap)
			return -ENOSPC;
		for (size_t i = 0; i < v.size(); i++)
			ids[i] = (uint32_t)v[i];
		return 0;
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
}

extern "C" size_t spm_vocab_size(const struct spm_model *m)
{
	return (size_t)m->sp.GetPieceSize();
}

extern "C" const char *spm_piece(const struct spm_model *m, uint32_t id, size_t *len, int *kind)
{
	const std::string &p = m->sp.IdToPiece((int)id);
	int i = (int)id;
	*kind = m->sp.IsUnknown(i)   ? SPM_UNKNOWN
		: m->sp.IsControl(i) ? SPM_CONTROL
		: m->sp.IsByte(i)    ? SPM_BYTE
		: m->sp.IsUnused(i)  ? SPM_UNUSED
				     : SPM_NORMAL;
	*len = p.size();
	return p.data();
}

/* The normalized text of <text>: its pieces joined (an unknown piece is the text it covers),
 * or "" when the library refuses it. */
static std::string normalized(const struct spm_model *m, const char *text)
{
	std::vector<std::string> pieces;
	std::string out;
	if (!m->sp.Encode(text, &pieces).ok())
		return out;
	for (const auto &p : pieces)
		out += p;
	return out;
}

extern "C" int spm_normalizer_flags(const struct spm_model *m, int *dummy_prefix,
				    int *remove_spaces)
{
	try {
		std::string a = normalized(m, "a"), sa = normalized(m, " a");
		if (a.empty() || sa.empty())
			return -EINVAL;
		*dummy_prefix = a.compare(0, 3, "\xe2\x96\x81") == 0; /* "▁a" */
		*remove_spaces = a == sa;
		return 0;
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
}

extern "C" int spm_bos_id(const struct spm_model *m)
{
	int id = m->sp.bos_id();
	return id >= 0 && id < m->sp.GetPieceSize() ? id : -1;
}
