//===- HGAttrs.cpp - the split annotation: syntax and verification -------===//
#include "hybridgen/Dialect/HG/HGAttrs.h"
#include "hybridgen/Dialect/HG/HGDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::hybridgen;

#include "hybridgen/Dialect/HG/HGEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "hybridgen/Dialect/HG/HGAttrs.cpp.inc"

void HGDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "hybridgen/Dialect/HG/HGAttrs.cpp.inc"
      >();
}

// Syntax: `<[cpu, gpu], point = (N | runtime) [, merge = lse] [, dense | sparse] [, top_k = K]>`.
Attribute SplitAttr::parse(AsmParser &parser, Type) {
  SMLoc startLoc = parser.getCurrentLocation();
  SmallVector<Device> devices;
  if (parser.parseLess() || parser.parseLSquare())
    return {};
  do {
    SMLoc loc = parser.getCurrentLocation();
    StringRef name;
    if (parser.parseKeyword(&name))
      return {};
    std::optional<Device> device = symbolizeDevice(name);
    if (!device) {
      parser.emitError(loc, "unknown device '") << name << "' (expected cpu or gpu)";
      return {};
    }
    devices.push_back(*device);
  } while (succeeded(parser.parseOptionalComma()));
  if (parser.parseRSquare() || parser.parseComma() || parser.parseKeyword("point") ||
      parser.parseEqual())
    return {};

  std::optional<int64_t> point;
  if (failed(parser.parseOptionalKeyword("runtime"))) {
    int64_t value;
    if (parser.parseInteger(value))
      return {};
    point = value;
  }

  MergeMode merge = MergeMode::lse;
  AttnMode mode = AttnMode::dense;
  int64_t topK = 0;
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc loc = parser.getCurrentLocation();
    StringRef field;
    if (parser.parseKeyword(&field))
      return {};
    if (field == "dense" || field == "sparse") {
      mode = field == "dense" ? AttnMode::dense : AttnMode::sparse;
    } else if (field == "merge") {
      StringRef name;
      SMLoc nameLoc = parser.getCurrentLocation();
      if (parser.parseEqual() || parser.parseKeyword(&name))
        return {};
      std::optional<MergeMode> parsed = symbolizeMergeMode(name);
      if (!parsed) {
        parser.emitError(nameLoc, "unknown merge mode '") << name << "' (expected lse)";
        return {};
      }
      merge = *parsed;
    } else if (field == "top_k") {
      if (parser.parseEqual() || parser.parseInteger(topK))
        return {};
    } else {
      parser.emitError(loc, "unknown split field '") << field << "'";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<SplitAttr>(startLoc, parser.getContext(), devices, point, merge, mode,
                                      topK);
}

void SplitAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  llvm::interleaveComma(getDevices(), printer,
                        [&](Device d) { printer << stringifyDevice(d); });
  printer << "], point = ";
  if (getPoint())
    printer << *getPoint();
  else
    printer << "runtime";
  printer << ", merge = " << stringifyMergeMode(getMerge()) << ", "
          << stringifyAttnMode(getMode());
  if (getTopK() != 0)
    printer << ", top_k = " << getTopK();
  printer << ">";
}

LogicalResult SplitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                ArrayRef<Device> devices, std::optional<int64_t> point,
                                MergeMode merge, AttnMode mode, int64_t topK) {
  if (devices.empty() || devices.size() > 2)
    return emitError() << "a split names one or two devices, got " << devices.size();
  if (devices.size() == 2 && devices[0] == devices[1])
    return emitError() << "device '" << stringifyDevice(devices[0])
                       << "' appears twice in the split";
  if (point && *point < 0)
    return emitError() << "split point must be non-negative, got " << *point;
  if (mode == AttnMode::dense && topK != 0)
    return emitError() << "top_k is only allowed in sparse mode";
  if (mode == AttnMode::sparse) {
    if (topK <= 0)
      return emitError() << "sparse mode needs a positive top_k";
    if (!llvm::is_contained(devices, Device::cpu))
      return emitError() << "sparse mode needs the cpu among the devices (it keeps the top-k)";
  }
  return success();
}
